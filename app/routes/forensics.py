"""Request forensics and the recorded views behind the dashboard's panels: one request's
whole life (GET /api/requests/{req}?session=ID&step=N; the live session by default),
a recording's request rows at a step (filtered like the live twin) and its KV block map
at a step (the KV map's history slider). All read the recording, so they answer the same
live, in replay and after a restart."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response

from app.api_docs import error_responses
from app.api_shapes import shape, shape_list
from app.db import queries
from app.db.done_counts import counts_scope
from app.db.request_page import request_page
from app.db.request_segments import add_segments
from app.deps import DbDep, HubDep, RecorderDep, View
from app.edge.bounds import StepQuery
from app.errors import NotFound
from app.live.hub import EventHub
from app.records.life_types import BlockMapData, RequestLifeData
from app.records.recorder import Recorder
from app.records.request_life import request_life
from app.request_table import (
    RequestQuery,
    live_rows_at,
    request_query,
)
from protocol.views import TableRow

TOTAL_HEADER = {
    "description": "rows matching the filters (all pages)",
    "schema": {"type": "integer"},
}
router = APIRouter(
    prefix="/api", dependencies=View, tags=["sessions"], responses=error_responses(401, 404, 422)
)


async def _settled(hub: EventHub, recorder: Recorder | None, session: str) -> None:
    """A live session's latest frames are written before they are read."""
    info = hub.sessions.get(session)
    if recorder is not None and info is not None and info.live:
        await recorder.flush()


@router.get(
    "/requests/{req_id}",
    response_model=shape(RequestLifeData, extra=True),
    summary="A request's whole life, read from the recording (forensics)",
)
async def life(
    req_id: str,
    db: DbDep,
    hub: HubDep,
    recorder: RecorderDep,
    session: str | None = None,
    step: StepQuery = None,
) -> RequestLifeData:
    """Everything `req_id` went through in `session` (default: the live one), up to
    `step` (default: its end): see app.records.request_life."""
    sid = session or hub.live_session
    if not sid:
        raise NotFound("no live session: name a recorded one with ?session=ID")
    await _settled(hub, recorder, sid)

    def load() -> RequestLifeData:
        with db() as s:
            return request_life(s, sid, req_id, step)

    return await asyncio.to_thread(load)


@router.get(
    "/sessions/{session_id}/requests",
    response_model=shape_list(TableRow, extra=True),
    summary="A recording's requests at a step, filtered, sorted and paged",
    responses={200: {"headers": {"X-Total-Count": TOTAL_HEADER}}},
)
async def recorded_rows(
    session_id: str,
    db: DbDep,
    hub: HubDep,
    recorder: RecorderDep,
    response: Response,
    query: Annotated[RequestQuery, Depends(request_query)],
    step: StepQuery = None,
    segments: Annotated[bool, Query(description="add each row's Gantt segments")] = False,
) -> list[dict[str, Any]]:
    """The request table of a recording at `step` (default: the last), with the query
    parameters of the live twin (/api/requests), every request of the recording at any
    size: done requests are filtered, sorted and paged (`offset`, `limit`) in the
    database, the live ones come from the state at the step. `X-Total-Count`: the rows
    matching, over all pages. `segments=1`: each row with its Gantt `segments`
    ([kind, start_step, end_step, tokens], closed at the step; null where the recording
    cannot give them: app.db.request_segments), for the replay Gantt."""
    await _settled(hub, recorder, session_id)

    def load() -> tuple[int, list[dict[str, Any]]]:
        with db() as s:
            meta = queries.get_session(s, session_id)
            at = meta["steps"] - 1 if step is None else step
            # Done by `at` in the database; the rest from the state at `at`.
            rows, pending, seq = live_rows_at(s, session_id, at)
            # Its done rows that no longer change are counted from kept counts.
            scope = counts_scope(meta)
            total, page = request_page(
                s, session_id, at, rows, query, pending, as_of=seq, scope=scope
            )
            if segments:
                add_segments(s, session_id, at, page)
            else:
                for r in page:  # the live rows' (copies)
                    r.pop("segments", None)
            return total, page

    total, page = await asyncio.to_thread(load)
    response.headers["X-Total-Count"] = str(total)
    return page


@router.get(
    "/sessions/{session_id}/blocks",
    response_model=shape(BlockMapData),
    summary="A recording's KV block map after a step",
)
async def recorded_blocks(
    session_id: str, db: DbDep, hub: HubDep, recorder: RecorderDep, step: StepQuery = None
) -> BlockMapData:
    """The KV block map after `step` (default: the last recorded step):
    `{session, step, blocks: [[block_id, state, owner, ref_cnt], ...]}`."""
    await _settled(hub, recorder, session_id)

    def load() -> BlockMapData:
        with db() as s:
            meta = queries.get_session(s, session_id)
            last = meta["steps"] - 1
            at = last if step is None else max(-1, min(step, last))
            state = queries.state_at_step(s, session_id, at)
            return {
                "session": session_id,
                "step": state.step,
                "blocks": state.blocks.rows(),
            }

    return await asyncio.to_thread(load)
