"""The live session's JSON twins (?session=ID, or ?live=ID for the rows: another live
session, e.g. a pushed node's): its state (the snapshot a late joiner gets), request rows
(filtered and sorted like the page's table: app.request_table), latency summary and knobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from app.api_docs import error_responses
from app.api_models import LiveConfig, WorkloadState
from app.api_shapes import shape, shape_list
from app.deps import HubDep, ServiceDep, View
from app.errors import NotFound
from app.frames.fold import SessionState
from app.request_table import RequestQuery, request_query, select_rows
from protocol import views
from protocol.views import TableRow

router = APIRouter(
    prefix="/api", dependencies=View, tags=["live"], responses=error_responses(401, 404)
)


def _live(hub: HubDep, session: str | None = None) -> SessionState:
    state = hub.live_state(session)
    if state is None:
        raise NotFound(f"no live session {session!r}" if session else "no live session")
    return state


@router.get("/state", response_model=shape(views.SnapshotData), summary="The live session's state")
async def state(hub: HubDep, session: str | None = None) -> Response:
    # Encoded directly: validating and re-serialising megabytes of rows through the
    # response model would cost the loop many times the fold itself.
    return Response(_live(hub, session).snapshot_json(), media_type="application/json")


@router.get(
    "/requests",
    response_model=shape_list(TableRow, extra=True),
    summary="The live session's requests (table rows), filtered and sorted",
    responses=error_responses(422),
)
async def requests_rows(
    hub: HubDep,
    query: Annotated[RequestQuery, Depends(request_query)],
    live: str | None = None,
) -> list[TableRow]:
    """The table's rows with `phase`, `e2e` and `waiting_text`; the query parameters are
    the page's filters (app.request_table)."""
    return select_rows(_live(hub, live).request_rows(), query)


@router.get(
    "/stats",
    response_model=shape(views.LatencySummary),
    summary="Latency percentiles and totals",
)
async def stats(hub: HubDep, session: str | None = None) -> views.LatencySummary:
    return _live(hub, session).latency_summary()


@router.get("/config", response_model=LiveConfig, summary="The live session's knobs")
async def config(hub: HubDep, service: ServiceDep, session: str | None = None) -> LiveConfig:
    """That session's own knobs; `workload` is the local engine's, on its session only."""
    live = _live(hub, session)
    local = service is not None and live.session == service.session
    workload = service.workload_spec() if service is not None and local else None
    return LiveConfig(
        config=live.config,
        config_version=live.config_version,
        workload=None if workload is None else WorkloadState.model_validate(workload),
    )
