"""Read side for one request of a recording: its row in the requests table, the frames of
the steps it ran (iterations by the (session, step) primary key, request marks by the
(session, step) index), streamed as stored text so the caller parses only the frames that
mention the request, and the waiting numbers of the steps it waited (step_waits)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.frame_codec import unpack_frame
from app.db.models import EventRecord, IterationRecord, RequestRecord, StepWaitRecord
from app.db.queries import iter_frames
from protocol.codes import FrameType
from protocol.wire import WaitingDetail

STREAM_ROWS = 500


def request_record(db: Session, session_id: str, req_id: str) -> dict[str, Any] | None:
    """The request's row (arrival, first schedule, finish...), or None if unknown."""
    rec = db.get(RequestRecord, (session_id, req_id))
    if rec is None:
        return None
    return {
        "req": rec.req_id,
        "arrival_step": rec.arrival_step,
        "arrival_t": rec.arrival_t,
        "num_prompt_tokens": rec.num_prompt_tokens,
        "max_tokens": rec.max_tokens,
        "priority": rec.priority,
        "first_scheduled_step": rec.first_scheduled_step,
        "first_token_t": rec.first_token_t,
        "finish_step": rec.finish_step,
        "finish_t": rec.finish_t,
        "finish_reason": rec.finish_reason,
        "num_preemptions": rec.num_preemptions,
        "num_cached_tokens": rec.prefix_hit_tokens,
        "num_output_tokens": rec.num_output_tokens,
    }


def iteration_texts(db: Session, session_id: str, first: int, last: int) -> Iterator[str]:
    """The iteration frames of steps first..last (inclusive) in step order, as stored: in
    the iteration rows of older recordings, else in the compressed frame blocks (read in
    seq order over the steps' seq range, keeping the iteration frames)."""
    query = (
        select(IterationRecord.seq, IterationRecord.frame)
        .where(
            IterationRecord.session_id == session_id,
            IterationRecord.step >= first,
            IterationRecord.step <= last,
        )
        .order_by(IterationRecord.step)
    )
    rows = list(db.execute(query))
    if not rows:
        return
    blocked = {seq for seq, frame in rows if not frame}
    if not blocked:
        for _, frame in rows:
            yield unpack_frame(frame)
        return
    stored = iter_frames(db, session_id, min(blocked) - 1, max(blocked))
    for seq, frame in rows:
        if frame:
            yield unpack_frame(frame)
            continue
        for got, text in stored:
            if got == seq:
                yield text
                break


def request_mark_texts(db: Session, session_id: str, first: int, last: int) -> Iterator[str]:
    """Every `request` frame of steps first..last in seq order (all requests: the caller
    keeps the ones of its request)."""
    query = (
        select(EventRecord.frame)
        .where(
            EventRecord.session_id == session_id,
            EventRecord.step >= first,
            EventRecord.step <= last,
            EventRecord.type == FrameType.REQUEST,
        )
        .order_by(EventRecord.seq)
        .execution_options(yield_per=STREAM_ROWS)
    )
    for frame in db.scalars(query):
        yield unpack_frame(frame)


def step_waits(
    db: Session, session_id: str, first: int, last: int
) -> dict[int, WaitingDetail | None]:
    """{step: waiting detail} of steps first..last that have a row (recordings made
    before the table have none): {} nothing waited, None no numbers in the frame."""
    query = select(StepWaitRecord.step, StepWaitRecord.detail).where(
        StepWaitRecord.session_id == session_id,
        StepWaitRecord.step >= first,
        StepWaitRecord.step <= last,
    )
    return {row.step: cast(WaitingDetail | None, row.detail) for row in db.execute(query)}
