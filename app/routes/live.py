"""The live session's JSON twins (?live=ID: another live session): its state (the
snapshot a late joiner gets), request rows, latency summary and knobs."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.deps import HubDep, ServiceDep, View
from app.errors import NotFound
from app.protocol.state import SessionState

router = APIRouter(prefix="/api", dependencies=View)


def _live(hub: HubDep) -> SessionState:
    state = hub.live_state()
    if state is None:
        raise NotFound("no live session")
    return state


@router.get("/state")
async def state(hub: HubDep) -> dict[str, Any]:
    return _live(hub).snapshot()


@router.get("/requests")
async def requests_rows(hub: HubDep) -> list[dict[str, Any]]:
    return _live(hub).request_rows()


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
