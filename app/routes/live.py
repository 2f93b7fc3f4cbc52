"""The live session's JSON twins (?live=ID: another live session): its state (the
snapshot a late joiner gets), request rows (filtered and sorted like the page's table:
app.request_table), latency summary and knobs."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request

from app.deps import HubDep, ServiceDep, View
from app.errors import NotFound
from app.forms import FormError
from app.protocol.state import SessionState
from app.request_table import parse_query, select_rows, table_rows

router = APIRouter(prefix="/api", dependencies=View)


def _live(hub: HubDep, session: str | None = None) -> SessionState:
    state = hub.live_state(session)
    if state is None:
        raise NotFound(f"no live session {session!r}" if session else "no live session")
    return state


@router.get("/state")
async def state(hub: HubDep) -> dict[str, Any]:
    return _live(hub).snapshot()


@router.get("/requests")
async def requests_rows(
    request: Request, hub: HubDep, live: str | None = None
) -> list[dict[str, Any]]:
    """The table's rows; the query parameters of app.request_table filter and sort them."""
    try:
        query = parse_query(request.query_params)
    except FormError as exc:
        raise HTTPException(422, str(exc)) from None
    return select_rows(table_rows(_live(hub, live)), query)


@router.get("/stats")
async def stats(hub: HubDep) -> dict[str, Any]:
    return _live(hub).latency_summary()


@router.get("/config")
async def config(hub: HubDep, service: ServiceDep) -> dict[str, Any]:
    live = _live(hub)
    return {
        "config": live.config,
        "config_version": live.config_version,
        "workload": service.workload_spec() if service else None,
    }
