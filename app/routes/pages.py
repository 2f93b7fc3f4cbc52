"""The dashboard page and its htmx panels (request table, latency summary).

Routes build plain data (from the live SessionState, the same data as the /api twins)
and the templates only format it (STYLE R8). `/?session=ID` is the same page replaying a
recording (panels then read the recorded state at the step on screen); `/?live=ID` follows
one live session (a remote node) instead of the current one. The sessions, compare and
nodes pages live in app/routes/record_pages.py.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.db import queries
from app.live.engine_service import SCENARIO_DIR, list_scenario_names
from app.protocol.state import SessionState
from app.routes import record_pages
from app.security import has_control, require_view
from app.templating import templates
from engine.scenario import ScenarioError, load_scenario

router = APIRouter(dependencies=[Depends(require_view)])
router.include_router(record_pages.router)

MAX_TABLE_ROWS = 150
ACTIVE = {"RUNNING": 0, "PREEMPTED": 1, "WAITING": 2}
KNOBS = (
    "max_num_batched_tokens",
    "max_num_seqs",
    "long_prefill_token_threshold",
    "enable_chunked_prefill",
    "scheduler_reserve_full_isl",
    "kv_block_limit",
    "policy",
)


def _state(request: Request, live: str | None = None) -> Any:
    return request.app.state.hub.live_state(live)


def _snapshot(state: SessionState | None) -> dict[str, Any]:
    if state is None:
        return {
            "session": None,
            "step": -1,
            "config": {},
            "requests": [],
            "history": [],
            "paused": False,
            "simulated": False,
            "meta": {},
            "totals": {},
        }
    snap: dict[str, Any] = state.snapshot()
    return snap


def scenario_list() -> list[dict[str, str]]:
    out = []
    for name in list_scenario_names():
        try:
            sc = load_scenario(SCENARIO_DIR / f"{name}.json")
        except (ScenarioError, OSError):
            continue
        out.append({"name": name, "title": sc.name or name, "description": sc.description})
    return out


def request_rows(snap: dict[str, Any], limit: int = MAX_TABLE_ROWS) -> list[dict[str, Any]]:
    """Live requests first (running, preempted, waiting), then the latest finished ones;
    each with TTFT and mean ITL in seconds (None until known)."""
    t_of = {h["step"]: h["t"] for h in snap.get("history", [])}
    now = snap.get("t", 0.0)
    rows = []
    for i, r in enumerate(snap.get("requests", [])):
        row = dict(r)
        arrived, first = r.get("arrived_t"), r.get("first_token_t")
        row["ttft"] = first - arrived if first is not None and arrived is not None else None
        outputs = max(0, r.get("num_tokens", 0) - r.get("num_prompt_tokens", 0))
        row["num_output_tokens"] = outputs
        end = t_of.get(r["finish_step"]) if r.get("finish_step") is not None else now
        if first is not None and end is not None and outputs > 1:
            row["itl"] = max(0.0, end - first) / (outputs - 1)
        else:
            row["itl"] = None
        row["_order"] = (ACTIVE.get(r.get("status", ""), 3), -i)
        rows.append(row)
    rows.sort(key=lambda x: x["_order"])
    return rows[:limit]


def _counts(snap: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {"total": 0}
    for r in snap.get("requests", []):
        status = r.get("status", "WAITING")
        counts[status] = counts.get(status, 0) + 1
        counts["total"] += 1
    return counts


def _summary(state: SessionState | None) -> dict[str, Any] | None:
    if state is None:
        return None
    summary: dict[str, Any] = state.latency_summary()
    return summary


async def recorded_state(
    request: Request, session: str, step: int | None
) -> tuple[dict[str, Any], SessionState] | None:
    """A recording's metadata and its state at `step` (default: the last); None if unknown."""

    def load() -> tuple[dict[str, Any], SessionState]:
        with request.app.state.db() as db:
            meta = queries.get_session(db, session)
            last = meta["steps"] - 1
            at = last if step is None else max(-1, min(step, last))
            return meta, queries.state_at_step(db, session, at)

    try:
        return await asyncio.to_thread(load)
    except queries.NotFound:
        return None


async def _panel_state(
    request: Request, replay: str | None, step: int | None, live: str | None
) -> SessionState | None:
    if replay:
        found = await recorded_state(request, replay, step)
        return found[1] if found else None
    state: SessionState | None = _state(request, live)
    return state


def _mode(replay: str | None, live: str | None) -> dict[str, Any]:
    """Template context that points the htmx panels at the session on screen."""
    return {"replay": replay, "follow": live, "panel_query": _panel_query(replay, live)}


def _panel_query(replay: str | None, live: str | None) -> str:
    if replay:
        return "?replay=" + quote(replay, safe="")
    return "?live=" + quote(live, safe="") if live else ""


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def dashboard(
    request: Request, session: str | None = None, live: str | None = None
) -> Response:
    hub = request.app.state.hub
    meta: dict[str, Any] = {}
    if session:
        found = await recorded_state(request, session, None)
        if found is None:
            return record_pages.not_found(request, f"no recorded session {session!r}")
        meta, state = found
        live = None
    elif live and live not in hub.sessions:
        return RedirectResponse("/?session=" + quote(live, safe=""), status_code=303)
    else:
        state = _state(request, live)
    snap = _snapshot(state)
    service = request.app.state.service
    config = meta.get("config") or snap.get("config") or {}
    return templates.TemplateResponse(
        request,
        "dashboard.html",
        {
            "snapshot": snap,
            "config": {k: snap.get("config", {}).get(k) for k in KNOBS},
            "rerun_config": config,
            "recording": meta,
            "scenarios": scenario_list(),
            "token_ok": has_control(request),
            "workload": service.workload_spec() if service is not None else None,
            "rows": request_rows(snap),
            "counts": _counts(snap),
            "summary": _summary(state),
            **_mode(session, live),
        },
    )


@router.get("/panels/requests", response_class=HTMLResponse, include_in_schema=False)
async def requests_panel(
    request: Request, replay: str | None = None, step: int | None = None, live: str | None = None
) -> HTMLResponse:
    snap = _snapshot(await _panel_state(request, replay, step, live))
    return templates.TemplateResponse(
        request,
        "partials/_request_table.html",
        {
            "rows": request_rows(snap),
            "counts": _counts(snap),
            "token_ok": has_control(request),
            **_mode(replay, live),
        },
    )


@router.get("/panels/controls", response_class=HTMLResponse, include_in_schema=False)
async def controls_panel(request: Request) -> HTMLResponse:
    """Re-rendered when the live session changes (a scenario has no Poisson workload)."""
    service = request.app.state.service
    return templates.TemplateResponse(
        request,
        "partials/_controls.html",
        {
            "token_ok": has_control(request),
            "workload": service.workload_spec() if service is not None else None,
        },
    )


@router.get("/panels/stats", response_class=HTMLResponse, include_in_schema=False)
async def stats_panel(
    request: Request, replay: str | None = None, step: int | None = None, live: str | None = None
) -> HTMLResponse:
    state = await _panel_state(request, replay, step, live)
    return templates.TemplateResponse(
        request, "partials/_stats.html", {"summary": _summary(state), **_mode(replay, live)}
    )
