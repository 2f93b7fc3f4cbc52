"""Sessions: the list (JSON and the /sessions page with its filterable rows), one
recording's row, rename, delete, its state at a step, and a re-run under other knobs."""

from __future__ import annotations

import asyncio
from enum import Enum
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse

from app.api_bodies import RenameBody, RerunBody, body_doc
from app.api_docs import CONTROL_ERRORS, error_responses
from app.api_models import Deleted, Renamed, RerunResult, SessionListRow
from app.api_shapes import shape
from app.db import queries
from app.db.session import write_transaction
from app.deps import Control, DbDep, HubDep, RecordedDbDep, RecorderDep, View, json_or_form
from app.edge.bounds import StepQuery
from app.forms import parse_config_changes
from app.live.hub import EventHub
from app.records.catalog import ListedSession, list_sessions
from app.records.node_rerun import node_knobs
from app.records.rerun import (
    RECORDED,
    Arrival,
    KnobChange,
    load_arrivals,
    load_knob_changes,
    load_timeline,
    recorded_release,
    replayed_knob_changes,
)
from app.records.rerun_process import RerunFailed, rerun_session
from app.routes.links import replay_href, session_href
from app.security import has_control
from app.templating import templates
from engine.config import ConfigError, EngineConfig
from engine.runner.cost_model import describe_cost_model, preset_names
from engine.runner.recorded_timeline import RecordedTimeline
from protocol.views import SnapshotData

router = APIRouter()
TAGS: list[str | Enum] = ["sessions"]
VIEW_ERRORS = error_responses(401, 404)
WRITE_ERRORS = {**CONTROL_ERRORS, **error_responses(404)}
RenameDep = Annotated[RenameBody, Depends(json_or_form(RenameBody))]
RerunDep = Annotated[RerunBody, Depends(json_or_form(RerunBody))]


@router.get(
    "/api/sessions",
    response_model=list[SessionListRow],
    summary="List sessions",
    dependencies=View,
    tags=TAGS,
    responses=VIEW_ERRORS,
)
async def sessions_json(db: DbDep, hub: HubDep, q: str | None = None) -> list[ListedSession]:
    """Live sessions not recorded yet first, then the recordings, newest first; `q`
    filters by id, name or source."""
    return await list_sessions(db, hub, q)


@router.get(
    "/api/sessions/{session_id}",
    summary="One recorded session",
    dependencies=View,
    tags=TAGS,
    responses=VIEW_ERRORS,
)
async def get_session(session_id: str, db: DbDep) -> queries.SessionRow:
    def load() -> queries.SessionRow:
        with db() as s:
            return queries.get_session(s, session_id)

    return await asyncio.to_thread(load)


@router.patch(
    "/api/sessions/{session_id}",
    response_model=Renamed,
    openapi_extra=body_doc(RenameBody),
    summary="Rename a recording",
    dependencies=Control,
    tags=TAGS,
    responses=WRITE_ERRORS,
)
async def rename(session_id: str, db: DbDep, body: RenameDep) -> Renamed:
    def write() -> None:
        with write_transaction(db) as s:
            queries.rename_session(s, session_id, body.name)

    await asyncio.to_thread(write)
    return Renamed(id=session_id, name=body.name)


@router.delete(
    "/api/sessions/{session_id}",
    response_model=Deleted,
    summary="Delete a recording (not a live session: 409)",
    dependencies=Control,
    tags=TAGS,
    responses=WRITE_ERRORS,
)
async def delete(session_id: str, db: DbDep, hub: HubDep) -> Deleted:
    info = hub.sessions.get(session_id)
    if info is not None and info.live:
        raise HTTPException(409, "this session is live; stop it before deleting its recording")

    def write() -> None:
        with write_transaction(db) as s:
            queries.delete_session(s, session_id)

    await asyncio.to_thread(write)
    hub.sessions.pop(session_id, None)
    return Deleted(deleted=session_id)


@router.get(
    "/api/sessions/{session_id}/state",
    response_model=shape(SnapshotData, extra=True),
    response_model_exclude_unset=True,
    summary="A recording's state at a step (default: its last)",
    dependencies=View,
    tags=TAGS,
    responses=VIEW_ERRORS,
)
async def state_at(session_id: str, db: RecordedDbDep, step: StepQuery = None) -> SnapshotData:
    def load() -> SnapshotData:
        with db() as s:
            meta = queries.get_session(s, session_id)
            target = meta["steps"] - 1 if step is None else step
            return queries.state_at_step(s, session_id, target).snapshot()

    return await asyncio.to_thread(load)


@router.post(
    "/api/sessions/{session_id}/rerun",
    response_model=RerunResult,
    openapi_extra=body_doc(RerunBody),
    summary="Re-run a recording's arrivals under other knobs",
    dependencies=Control,
    tags=TAGS,
    responses=WRITE_ERRORS,
)
async def rerun(
    session_id: str, db: RecordedDbDep, recorder: RecorderDep, body: RerunDep
) -> RerunResult:
    """The recording's arrivals at their recorded times, under its knobs and release: the
    knobs it started with, changed when the recording changed them. A knob given here
    holds for the whole re-run (its recorded changes are dropped)."""
    knobs = body.model_dump(exclude_none=True)
    runner = str(knobs.pop("runner", RECORDED))
    name = str(knobs.pop("name", ""))
    cost_model = knobs.pop("cost_model", None) or None
    cost_label = check_rerun_cost_model(cost_model, runner)

    def load() -> tuple[
        queries.SessionRow, list[Arrival], tuple[str, str], list[KnobChange], RecordedTimeline
    ]:
        with db() as s:
            meta, arrivals = load_arrivals(s, session_id)
            release = recorded_release(s, session_id)
            timeline = load_timeline(s, session_id) if runner == RECORDED else RecordedTimeline()
            return meta, arrivals, release, load_knob_changes(s, session_id), timeline

    meta, arrivals, (release, chosen), recorded_changes, timeline = await asyncio.to_thread(load)
    try:
        # A vLLM node's knobs that our engine lacks are dropped, named when not default.
        known, not_modelled = node_knobs(meta["config"] or {})
        recorded = {**known, "vllm_version": release}
        base = EngineConfig().with_updates(**recorded)
        changes = parse_config_changes(knobs, rerun=True) if knobs else {}
        if "vllm_version" in changes:
            chosen = "as asked"
        config = base.with_updates(**changes)
        # Knobs changed during the recording change at their times; one given here holds.
        replayed = replayed_knob_changes(config, recorded_changes, changes)
    except ConfigError as exc:
        raise HTTPException(422, f"{exc.field}: {exc.message}") from None
    if not arrivals:
        raise HTTPException(422, "this recording has no re-runnable arrivals")
    if recorder is None:
        raise HTTPException(503, "the recorder is not running")
    try:
        new_id, label, steps = await rerun_session(
            recorder,
            meta,
            arrivals,
            config,
            changes,
            runner,
            name,
            replayed,
            timeline,
            not_modelled,
            cost_model,
        )
    except RerunFailed as exc:
        raise HTTPException(503, str(exc)) from None
    return RerunResult(
        session=new_id,
        name=label,
        steps=steps,
        vllm_version=config.vllm_version,
        release_chosen=chosen,
        not_modelled=not_modelled,
        cost_model=cost_model,
        cost_model_label=cost_label,
    )


def check_rerun_cost_model(cost_model: str | None, runner: str) -> str | None:
    """A re-run's cost model: a preset (never a server file), for runner sim only; its
    label, or None without one. Raises 422 naming the field."""
    if cost_model is None:
        return None
    if runner != "sim":
        raise HTTPException(
            422,
            "cost_model: for runner sim only (recorded follows the recording's clock; "
            "torch measures)",
        )
    if cost_model not in preset_names():
        raise HTTPException(
            422, f"cost_model: unknown preset {cost_model!r} (GET /api/lab lists them)"
        )
    return describe_cost_model(cost_model)["label"]


# ---------------------------------------------------------------- the page
async def _page_rows(db: DbDep, hub: EventHub, q: str | None) -> list[ListedSession]:
    text = (q or "").strip()
    rows = await list_sessions(db, hub, text or None)
    if text:
        # The database matches with LIKE: keep only plain substring matches, as live ones.
        needle = text.lower()
        rows = [r for r in rows if needle in f"{r['id']} {r['name']} {r['source']}".lower()]
    for row in rows:
        row["href"] = session_href(hub, row["id"], bool(row.get("live")))
        row["replay_href"] = replay_href(row["id"])
    return rows


async def _render(
    request: Request, template: str, db: DbDep, hub: EventHub, q: str | None
) -> HTMLResponse:
    rows = await _page_rows(db, hub, q)
    context = {"rows": rows, "q": q or "", "token_ok": has_control(request)}
    return templates.TemplateResponse(request, template, context)


@router.get("/sessions", response_class=HTMLResponse, include_in_schema=False, dependencies=View)
async def sessions_page(
    request: Request, db: DbDep, hub: HubDep, q: str | None = None
) -> HTMLResponse:
    return await _render(request, "sessions.html", db, hub, q)


@router.get(
    "/panels/sessions", response_class=HTMLResponse, include_in_schema=False, dependencies=View
)
async def sessions_rows(
    request: Request, db: DbDep, hub: HubDep, q: str | None = None
) -> HTMLResponse:
    """The rows alone: what the page's filter swaps in."""
    return await _render(request, "partials/_sessions_rows.html", db, hub, q)
