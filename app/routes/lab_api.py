"""The lab's JSON API: /api/lab (the twin of /lab), sweeps (start, list, one, cancel,
delete, download as CSV/JSON), ready experiments (run one), and a point opened as a
recorded session (for the replay and /compare)."""

from __future__ import annotations

import asyncio
import json
from enum import Enum
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy.orm import Session, sessionmaker

from app.api_bodies import LabSweepBody, body_doc
from app.api_docs import CONTROL_ERRORS, error_responses
from app.api_models import Deleted, LabCancel, LabStarted, PointSession
from app.db import queries
from app.deps import Control, DbDep, HubDep, RecorderDep, View, json_or_form
from app.edge.bounds import IndexPath
from app.errors import NotFound
from app.lab import store
from app.lab.background import LabDep, LabWorker
from app.lab.experiments import get_experiment
from app.lab.export import csv_text, results_of, sweep_json
from app.lab.form import spec_from_form
from app.lab.point_session import record_point
from app.lab.spec import SweepSpec
from app.lab.views import Overview, SweepView, overview, sweep_href, sweep_view
from app.routes.links import replay_href
from engine.sweep import SweepPoint

router = APIRouter(prefix="/api/lab")
TAGS: list[str | Enum] = ["lab"]
VIEW_ERRORS = error_responses(401, 404)
WRITE_ERRORS = {**CONTROL_ERRORS, **error_responses(404)}
SweepBodyDep = Annotated[LabSweepBody, Depends(json_or_form(LabSweepBody))]
STARTED: dict[int | str, dict[str, Any]] = {201: {"model": LabStarted, "description": "queued"}}


@router.get("", dependencies=View, tags=TAGS, responses=VIEW_ERRORS)
async def lab(db: DbDep, lab: LabDep) -> Overview:
    rows = await asyncio.to_thread(store.list_sweeps, db)
    return overview(rows, lab.status())


@router.get("/sweeps", dependencies=View, tags=TAGS, responses=VIEW_ERRORS)
async def sweeps(db: DbDep) -> list[store.SweepRow]:
    return await asyncio.to_thread(store.list_sweeps, db)


async def _start(request: Request, lab: LabWorker, spec: SweepSpec) -> Response:
    """Check every point, queue the sweep; 201 with its id (htmx: go to its page)."""
    try:
        points = await asyncio.to_thread(spec.points)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    sweep_id = await asyncio.to_thread(lab.submit, spec, len(points))
    href = sweep_href(sweep_id)
    headers = {"HX-Redirect": href} if request.headers.get("hx-request") == "true" else {}
    body = {"sweep": sweep_id, "href": href, "points": len(points)}
    return JSONResponse(body, status_code=201, headers=headers)


@router.post(
    "/sweeps",
    dependencies=Control,
    tags=TAGS,
    status_code=201,
    summary="Start a sweep",
    openapi_extra=body_doc(LabSweepBody),
    responses={**STARTED, **WRITE_ERRORS},
    response_model=LabStarted,
)
async def start(request: Request, db: DbDep, lab: LabDep, body: SweepBodyDep) -> Response:
    data = body.model_dump(exclude_none=True)
    try:
        spec = await asyncio.to_thread(spec_from_form, data, db)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    return await _start(request, lab, spec)


@router.post(
    "/experiments/{experiment}/run",
    dependencies=Control,
    tags=TAGS,
    status_code=201,
    summary="Run a ready experiment",
    responses={**STARTED, **WRITE_ERRORS},
    response_model=LabStarted,
)
async def run_experiment(experiment: str, request: Request, lab: LabDep) -> Response:
    spec = await asyncio.to_thread(get_experiment(experiment).spec)
    return await _start(request, lab, spec)


@router.get("/sweeps/{sweep_id}", dependencies=View, tags=TAGS, responses=VIEW_ERRORS)
async def sweep(sweep_id: str, db: DbDep) -> SweepView:
    return sweep_view(await asyncio.to_thread(store.get_sweep, db, sweep_id))


@router.get(
    "/sweeps/{sweep_id}/download",
    dependencies=View,
    tags=TAGS,
    responses={
        200: {"content": {"text/csv": {}, "application/json": {}}},
        **error_responses(401, 404, 422),
    },
)
async def download(sweep_id: str, db: DbDep, format: str = "csv") -> Response:
    if format not in ("csv", "json"):
        raise HTTPException(422, "format: csv or json")
    detail = await asyncio.to_thread(store.get_sweep, db, sweep_id)
    disposition = {"Content-Disposition": f'attachment; filename="{sweep_id}.{format}"'}
    if format == "csv":
        text = csv_text(results_of(detail["points"]))
        return Response(text, media_type="text/csv; charset=utf-8", headers=disposition)
    text = json.dumps(sweep_json(detail), indent=1) + "\n"
    return Response(text, media_type="application/json", headers=disposition)


@router.post(
    "/sweeps/{sweep_id}/cancel",
    dependencies=Control,
    tags=TAGS,
    responses=WRITE_ERRORS,
    response_model=LabCancel,
)
async def cancel(sweep_id: str, db: DbDep, lab: LabDep) -> LabCancel:
    await asyncio.to_thread(store.get_sweep, db, sweep_id)  # 404 if unknown
    if not lab.cancel(sweep_id):
        raise HTTPException(409, "this sweep is not running")
    return LabCancel(sweep=sweep_id, cancelling=True)


@router.delete(
    "/sweeps/{sweep_id}",
    dependencies=Control,
    tags=TAGS,
    responses=WRITE_ERRORS,
    response_model=Deleted,
)
async def delete(sweep_id: str, db: DbDep) -> Deleted:
    detail = await asyncio.to_thread(store.get_sweep, db, sweep_id)
    if detail["status"] in store.UNFINISHED:
        raise HTTPException(409, "this sweep is still running: cancel it first")
    await asyncio.to_thread(store.delete_sweep, db, sweep_id)
    return Deleted(deleted=sweep_id)


@router.post(
    "/sweeps/{sweep_id}/points/{index}/session",
    dependencies=Control,
    tags=TAGS,
    responses=WRITE_ERRORS,
    response_model=PointSession,
)
async def open_point(
    sweep_id: str, index: IndexPath, db: DbDep, hub: HubDep, recorder: RecorderDep
) -> PointSession:
    """The point as a recorded session (made once, then reused while it exists)."""
    detail = await asyncio.to_thread(store.get_sweep, db, sweep_id)
    row = next((p for p in detail["points"] if p["index"] == index), None)
    if row is None:
        raise HTTPException(404, f"sweep {sweep_id} has no finished point {index}")
    session = row["session"]
    if session is None or not await asyncio.to_thread(_session_exists, db, session):
        point = SweepPoint(index, row["knobs"], row["repeat"])
        session = await record_point(hub, detail, point)
        if recorder is not None:
            await recorder.flush()
        await asyncio.to_thread(store.set_point_session, db, sweep_id, index, session)
    return PointSession(session=session, href=replay_href(session))


def _session_exists(db: sessionmaker[Session], session_id: str) -> bool:
    with db() as s:
        try:
            queries.get_session(s, session_id)
        except NotFound:
            return False
    return True
