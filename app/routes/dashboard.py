"""The dashboard page and its htmx panels (controls, latency summary); the request table
and the timeline are drawn in the page from its socket's model (static/js).

Routes build plain data (from the live SessionState, the same data as the /api twins)
and the templates only format it (STYLE R8). `/?session=ID` is the same page replaying a
recording (panels then read the recorded state at the step on screen); `/?live=ID` follows
one live session (a remote node) instead of the current one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Annotated, TypedDict
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.db import queries
from app.deps import DbDep, HubDep, NodesDep, ServiceDep, View
from app.edge.bounds import StepQuery
from app.errors import NotFound
from app.frames.fold import SessionState
from app.nodes.control import control_refusal
from app.nodes.ingest import NodeRegistry
from app.nodes.local_engine import LocalEngine
from app.nodes.scenarios import scenario_summaries
from app.security import has_control
from app.templating import templates
from engine.runner.cost_model import preset_catalog
from protocol.views import LatencySummary, SnapshotHead
from protocol.wire import Knobs

router = APIRouter(dependencies=View, include_in_schema=False)

KNOBS = (
    "max_num_batched_tokens",
    "max_num_seqs",
    "long_prefill_token_threshold",
    "enable_chunked_prefill",
    "scheduler_reserve_full_isl",
    "kv_block_limit",
    "policy",
    "vllm_version",
    "max_num_active_seqs",
    "watermark",
    "prefill_schedule_interval",
    "long_prefill_token_threshold_adaptive",
)


class _HeaderBase(TypedDict):
    session: str | None
    step: int
    config: Knobs
    paused: bool
    simulated: bool


class Header(_HeaderBase, total=False):
    """What the page renders before its socket's snapshot arrives."""

    meta: dict[str, str]
    """The session's `name` and `workload` (`demo`: the page's caption says what is on
    screen)."""
    num_requests: int


class Mode(TypedDict):
    """Template context that points the htmx panels at the session on screen."""

    replay: str | None
    follow: str | None
    panel_query: str


class Controls(TypedDict):
    """What the controls panel offers for the session on screen."""

    token_ok: bool
    refusal: str | None
    """Why that session's producer cannot be driven (the controls are disabled)."""
    local_page: bool
    """The session is the local engine's (or none yet): its own panels are shown."""
    workload: dict[str, object] | None
    engine: dict[str, object] | None
    config_now: Knobs


def controls(
    request: Request,
    hub: HubDep,
    nodes: NodeRegistry,
    service: LocalEngine | None,
    head: SnapshotHead | None,
) -> Controls:
    """The controls of the session on screen (`head`: its state's; None: the live one, if
    any): its producer's, or disabled with the reason; the local engine's panels
    (process, workload, scenarios) on its own session only."""
    sid = head["session"] if head is not None else hub.live_session
    local_page = service is not None and (sid is None or sid == service.session)
    return {
        "token_ok": has_control(request),
        "refusal": control_refusal(hub, nodes, service, sid),
        "local_page": local_page,
        "workload": service.workload_spec() if service is not None and local_page else None,
        "engine": service.status() if service is not None and local_page else None,
        "config_now": head["config"] if head is not None else {},
    }


def _header(head: SnapshotHead | None, num_requests: int) -> Header:
    """What the page renders before its socket's snapshot arrives (the rows come with
    the snapshot: a 10,000-request page is not rendered twice). `num_requests`: every
    request of the session (finished rows past the state's bound included)."""
    if head is None:
        return {"session": None, "step": -1, "config": {}, "paused": False, "simulated": False}
    return {
        "session": head["session"],
        "step": head["step"],
        "config": head["config"],
        "paused": head["paused"],
        "simulated": head["simulated"],
        "meta": {
            "name": head["meta"].get("name", ""),
            "workload": str(head["meta"].get("workload", "")),
        },
        "num_requests": num_requests,
    }


async def recorded_state(
    db: DbDep, session: str, step: int | None
) -> tuple[queries.SessionRow, SessionState]:
    """A recording's metadata and its state at `step` (default: the last). Raises NotFound."""

    def load() -> tuple[queries.SessionRow, SessionState]:
        with db() as s:
            meta = queries.get_session(s, session)
            last = meta["steps"] - 1
            at = last if step is None else max(-1, min(step, last))
            return meta, queries.state_at_step(s, session, at)

    return await asyncio.to_thread(load)


@dataclass(frozen=True, slots=True)
class Panel:
    """What an htmx panel shows: the latency summary of the session on screen (a
    recording's at `?replay=ID&step=K`, none if unknown; else the live one, or
    `?live=ID`) and the template context that points the panel's next refresh at the
    same session."""

    summary: LatencySummary | None
    """Its latency summary (None: no such session)."""
    mode: Mode


async def panel(
    db: DbDep,
    hub: HubDep,
    replay: str | None = None,
    step: StepQuery = None,
    live: str | None = None,
) -> Panel:
    mode = _mode(replay, live)
    if not replay:
        live_state = hub.live_state(live)
        return Panel(None if live_state is None else live_state.latency_summary(), mode)
    try:
        return Panel((await recorded_state(db, replay, step))[1].latency_summary(), mode)
    except NotFound:
        return Panel(None, mode)


PanelDep = Annotated[Panel, Depends(panel)]


def _mode(replay: str | None, live: str | None) -> Mode:
    """Template context that points the htmx panels at the session on screen."""
    return {"replay": replay, "follow": live, "panel_query": _panel_query(replay, live)}


def _panel_query(replay: str | None, live: str | None) -> str:
    if replay:
        return "?replay=" + quote(replay, safe="")
    return "?live=" + quote(live, safe="") if live else ""


@router.get("/", response_class=HTMLResponse)
async def dashboard(
    request: Request,
    db: DbDep,
    hub: HubDep,
    nodes: NodesDep,
    service: ServiceDep,
    session: str | None = None,
    live: str | None = None,
) -> Response:
    meta: queries.SessionRow | None = None
    shown: SessionState | None  # the session on screen
    if session:
        meta, shown = await recorded_state(db, session, None)
        live = None
    elif live and live not in hub.sessions:
        return RedirectResponse("/?session=" + quote(live, safe=""), status_code=303)
    else:
        shown = hub.live_state(live)
    head = None if shown is None else shown.head()
    snap = _header(head, 0 if shown is None else shown.num_requests)
    config = (meta and meta["config"]) or snap.get("config") or {}
    return templates.TemplateResponse(
        request,
        "dashboard.html",
        {
            "snapshot": snap,
            "config": {k: snap.get("config", {}).get(k) for k in KNOBS},
            "rerun_config": config,
            "recording": meta or {},
            "cost_models": preset_catalog() if session else [],
            "scenarios": scenario_summaries(),
            **controls(request, hub, nodes, None if session else service, head),
            "summary": None if shown is None else shown.latency_summary(),
            **_mode(session, live),
        },
    )


@router.get("/panels/controls", response_class=HTMLResponse)
async def controls_panel(
    request: Request, hub: HubDep, nodes: NodesDep, service: ServiceDep, live: str | None = None
) -> HTMLResponse:
    """Re-rendered when the session on screen changes (a scenario has no Poisson workload;
    an engine process that exited says how; `?live=ID`: that session's producer)."""
    shown = hub.live_state(live)
    context = {
        **controls(request, hub, nodes, service, None if shown is None else shown.head()),
        **_mode(None, live),
    }
    return templates.TemplateResponse(request, "partials/_controls.html", context)


@router.get("/panels/stats", response_class=HTMLResponse)
async def stats_panel(request: Request, view: PanelDep) -> HTMLResponse:
    context = {"summary": view.summary, **view.mode}
    return templates.TemplateResponse(request, "partials/_stats.html", context)
