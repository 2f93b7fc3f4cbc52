"""The fleet (nodes on the NATS bus): GET /fleet and its JSON twin /api/fleet, every node at
a glance from its per-step summaries, sortable; /fleet/{node} opens one node's full view
(it asks the node for full detail first), and the API asks for detail or an incident
window."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from typing_extensions import TypedDict

from app.api_docs import CONTROL_ERRORS, VIEW_ERRORS, error_responses
from app.bus.fleet import FleetRow
from app.deps import BusDep, Control, FleetDep, HubDep, ServiceDep, SettingsDep, View
from app.routes.links import session_href
from app.templating import templates
from protocol.codes import MessageType

router = APIRouter()
SORT_KEYS = tuple(FleetRow.__annotations__)
SortKey = Literal[
    "node", "session", "step", "steps_per_s", "tokens_per_s", "running", "waiting",
    "kv_used", "kv_total", "kv_pct", "preemptions", "preemptions_recent", "stalls",
    "stalled_now", "step_ms", "missed_steps", "age_s",
]  # fmt: skip
OPEN_WAIT_S = 5.0


class FleetPage(TypedDict):
    bus: dict[str, Any] | None
    """The bus as this dashboard consumes it (null without --bus): totals, steps/s and
    frames/s through it, end-to-end lag p50/p99 in ms."""
    sort: str
    desc: bool
    nodes: list[FleetRow]


def _page(fleet: FleetDep, bus: BusDep, sort: str, desc: bool) -> FleetPage:
    return {
        "bus": bus.status() if bus is not None else None,
        "sort": sort,
        "desc": desc,
        "nodes": fleet.rows(sort, desc),
    }


@router.get(
    "/api/fleet",
    tags=["nodes"],
    dependencies=View,
    responses=VIEW_ERRORS,
    summary="Every node on the bus at a glance (from its per-step summaries)",
)
async def fleet_api(
    fleet: FleetDep, bus: BusDep, sort: SortKey = "node", desc: bool = False
) -> FleetPage:
    return _page(fleet, bus, sort, desc)


@router.get("/fleet", response_class=HTMLResponse, include_in_schema=False, dependencies=View)
async def fleet_page(
    request: Request, fleet: FleetDep, bus: BusDep, sort: SortKey = "node", desc: bool = False
) -> HTMLResponse:
    ctx = {"page": _page(fleet, bus, sort, desc), "keys": SORT_KEYS}
    return templates.TemplateResponse(request, "fleet.html", ctx)


@router.get(
    "/panels/fleet", response_class=HTMLResponse, include_in_schema=False, dependencies=View
)
async def fleet_panel(
    request: Request, fleet: FleetDep, bus: BusDep, sort: SortKey = "node", desc: bool = False
) -> HTMLResponse:
    ctx = {"page": _page(fleet, bus, sort, desc), "keys": SORT_KEYS}
    return templates.TemplateResponse(request, "partials/_fleet_table.html", ctx)


def _bus_or_404(bus: BusDep) -> Any:
    if bus is None:
        raise HTTPException(404, "no fleet bus: start the dashboard with --bus nats://HOST:PORT")
    return bus


async def _ask(call: Any) -> dict[str, Any]:
    try:
        reply: dict[str, Any] = await call
    except TimeoutError as exc:
        raise HTTPException(503, str(exc)) from None
    if reply.get("type") == MessageType.ERROR:
        raise HTTPException(422, str(reply.get("detail")))
    return reply


@router.get("/fleet/{node}", include_in_schema=False, dependencies=View)
async def open_node(
    node: str, bus: BusDep, hub: HubDep, settings: SettingsDep, service: ServiceDep
) -> Response:
    """One node's full view: ask it for full detail (its flight recorder first), wait for
    its session to arrive, then open it live. This dashboard's own engine opens at once."""
    intake = _bus_or_404(bus)
    if service is not None and node == settings.bus_node_name() and service.session:
        return RedirectResponse(session_href(hub, service.session, True), status_code=303)
    reply = await _ask(intake.request_detail(node, 60.0))
    session = str(reply.get("session") or "")
    deadline = time.monotonic() + OPEN_WAIT_S
    while session not in hub.sessions and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    if session not in hub.sessions:
        raise HTTPException(503, f"node {node!r} has not sent its frames yet; try again")
    return RedirectResponse(session_href(hub, session, True), status_code=303)


@router.post(
    "/api/fleet/{node}/detail",
    tags=["nodes"],
    dependencies=Control,
    responses={**CONTROL_ERRORS, **error_responses(404)},
    summary="Ask a node for full per-step detail (from its flight recorder on)",
)
async def detail(
    node: str, bus: BusDep, for_s: Annotated[float, Query(ge=0, le=3600)] = 60.0
) -> dict[str, Any]:
    return await _ask(_bus_or_404(bus).request_detail(node, for_s))


@router.post(
    "/api/fleet/{node}/window",
    tags=["nodes"],
    dependencies=Control,
    responses={**CONTROL_ERRORS, **error_responses(404)},
    summary="Ask a node for the full detail of its last `seconds` (an incident window)",
)
async def window(
    node: str, bus: BusDep, seconds: Annotated[float, Query(gt=0, le=86_400)] = 60.0
) -> dict[str, Any]:
    return await _ask(_bus_or_404(bus).request_window(node, seconds))
