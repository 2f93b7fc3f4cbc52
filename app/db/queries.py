"""Read side of recordings: plain dicts and frames out, never ORM objects."""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from typing import Any

from sqlalchemy import delete, func, or_, select
from sqlalchemy.orm import Session
from typing_extensions import TypedDict

from app import fast_json
from app.db import checkpoint_queue
from app.db.checkpoint_codec import decode_checkpoint
from app.db.frame_codec import unpack_block, unpack_frame
from app.db.models import (
    CheckpointRecord,
    DoneCountsRecord,
    EventRecord,
    FrameBlockRecord,
    IterationRecord,
    LiveRowsRecord,
    RequestRecord,
    SessionRecord,
    StepWaitRecord,
)
from app.errors import NotFound
from app.frames.fold import SessionState
from protocol.wire import Knobs

log = logging.getLogger("batchscope.queries")

PAGE = 2000
BLOCK_PAGE = 16


class SessionRow(TypedDict):
    """A recorded session as the API, the pages, export and the CLI see it."""

    id: str
    name: str
    source: str
    runner: str
    model: str
    device: str
    simulated: bool
    config: Knobs
    started_at: float
    ended_at: float | None
    end_reason: str | None
    steps: int
    requests: int
    last_seq: int


def session_dict(rec: SessionRecord) -> SessionRow:
    return {
        "id": rec.id,
        "name": rec.name,
        "source": rec.source,
        "runner": rec.runner,
        "model": rec.model,
        "device": rec.device,
        "simulated": rec.simulated,
        "config": rec.config,
        "started_at": rec.started_at,
        "ended_at": rec.ended_at,
        "end_reason": rec.end_reason,
        "steps": rec.num_steps,
        "requests": rec.num_requests,
        "last_seq": rec.last_seq,
    }


def list_sessions(db: Session, text: str | None = None, limit: int = 500) -> list[SessionRow]:
    query = select(SessionRecord).order_by(SessionRecord.started_at.desc()).limit(limit)
    if text:
        pattern = f"%{text}%"
        query = query.where(
            or_(
                SessionRecord.name.ilike(pattern),
                SessionRecord.id.ilike(pattern),
                SessionRecord.source.ilike(pattern),
            )
        )
    return [session_dict(r) for r in db.scalars(query)]


def get_session(db: Session, session_id: str) -> SessionRow:
    rec = db.get(SessionRecord, session_id)
    if rec is None:
        raise NotFound(f"no recorded session {session_id!r}")
    return session_dict(rec)


def rename_session(db: Session, session_id: str, name: str) -> None:
    rec = db.get(SessionRecord, session_id)
    if rec is None:
        raise NotFound(f"no recorded session {session_id!r}")
    rec.name = name


def delete_session(db: Session, session_id: str) -> None:
    if db.get(SessionRecord, session_id) is None:
        raise NotFound(f"no recorded session {session_id!r}")
    for model in (
        CheckpointRecord,
        DoneCountsRecord,
        EventRecord,
        FrameBlockRecord,
        IterationRecord,
        LiveRowsRecord,
        RequestRecord,
        StepWaitRecord,
    ):
        db.execute(delete(model).where(model.session_id == session_id))  # type: ignore[attr-defined]
    db.execute(delete(SessionRecord).where(SessionRecord.id == session_id))


def iter_frames(
    db: Session, session_id: str, after_seq: int = 0, upto_seq: int | None = None
) -> Iterator[tuple[int, str]]:
    """(seq, encoded frame) in seq order, merged from iteration blocks, other frames'
    rows and (recordings made before blocks) iteration rows; paged."""
    cursor = after_seq
    while True:
        sources = [
            _block_frames(db, session_id, cursor, upto_seq),
            _row_frames(db, EventRecord, session_id, cursor, upto_seq),
            _row_frames(db, IterationRecord, session_id, cursor, upto_seq, legacy=True),
        ]
        if not any(rows for rows, _ in sources):
            return
        # A source cut short by its page size covers seqs only up to its last one.
        limit = min((last for _, last in sources if last is not None), default=None)
        for seq, frame in sorted(item for rows, _ in sources for item in rows):
            if limit is not None and seq > limit:
                break
            yield seq, frame
            cursor = seq


PageOf = tuple[list[tuple[int, str]], int | None]
"""Frames of one source, and the last seq it covers when its page was full (else None)."""


def _row_frames(
    db: Session,
    model: type[EventRecord] | type[IterationRecord],
    session_id: str,
    after: int,
    upto: int | None,
    legacy: bool = False,
) -> PageOf:
    query = select(model.seq, model.frame).where(model.session_id == session_id, model.seq > after)
    if upto is not None:
        query = query.where(model.seq <= upto)
    if legacy:
        # Iteration rows hold their frame only in recordings made before blocks: look
        # only below the session's first block, if it has any.
        first = db.scalar(
            select(func.min(FrameBlockRecord.first_seq)).where(
                FrameBlockRecord.session_id == session_id
            )
        )
        if first is not None:
            query = query.where(model.seq < first)
    rows = [(seq, unpack_frame(f)) for seq, f in db.execute(query.order_by(model.seq).limit(PAGE))]
    return rows, rows[-1][0] if len(rows) == PAGE else None


def _block_frames(db: Session, session_id: str, after: int, upto: int | None) -> PageOf:
    B = FrameBlockRecord
    # The blocks' bounds first (ix_frame_blocks_session_last), then the frames of those
    # that reach `upto`: with `first_seq <= upto` in the same query, SQLite walked every
    # later block of the session to fill its page (37 ms for a seek early in a
    # 100,000-request recording). Blocks hold disjoint, ascending seq ranges.
    bounds = db.execute(
        select(B.first_seq)
        .where(B.session_id == session_id, B.last_seq > after)
        .order_by(B.last_seq)
        .limit(BLOCK_PAGE)
    ).all()
    wanted = [b.first_seq for b in bounds if upto is None or b.first_seq <= upto]
    blocks: list[bytes] = []
    if wanted:
        # In first_seq order (the same, blocks being disjoint): the primary key then finds
        # each block. In last_seq order SQLite walked that index through every block of
        # the session for the two a seek wanted (30-110 ms at 100,000 requests, not 0.5).
        blocks = list(
            db.scalars(
                select(B.frames)
                .where(B.session_id == session_id, B.first_seq.in_(wanted))
                .order_by(B.first_seq)
            )
        )
    rows: list[tuple[int, str]] = []
    for block in blocks:
        rows.extend(
            (seq, text)
            for seq, text in unpack_block(block)
            if seq > after and (upto is None or seq <= upto)
        )
    full = len(bounds) == BLOCK_PAGE and len(wanted) == len(bounds) and rows
    return rows, rows[-1][0] if full else None


def last_seq_at_step(db: Session, session_id: str, step: int) -> int:
    """The last frame that belongs to steps <= `step` (frames' steps never decrease)."""
    # ORDER BY step DESC LIMIT 1 walks the (session, step) index from the end instead of
    # scanning every row up to `step` (iterations' PK is (session, step)).
    a = db.scalar(
        select(IterationRecord.seq)
        .where(IterationRecord.session_id == session_id, IterationRecord.step <= step)
        .order_by(IterationRecord.step.desc())
        .limit(1)
    )
    b = db.scalar(
        select(EventRecord.seq)
        .where(EventRecord.session_id == session_id, EventRecord.step <= step)
        .order_by(EventRecord.step.desc(), EventRecord.seq.desc())
        .limit(1)
    )
    return max(a or 0, b or 0)


def state_at_seq(db: Session, session_id: str, seq: int) -> SessionState:
    """Nearest checkpoint at or before `seq`, then fold the frames after it."""
    # Parsing a checkpoint allocates ~10^5 small objects; a cyclic-GC pass in the middle
    # would add tens of ms to a seek for nothing (none of it is garbage yet).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _state_at_seq(db, session_id, seq)
    finally:
        if was_enabled:
            gc.enable()


def _state_at_seq(db: Session, session_id: str, seq: int) -> SessionState:
    state: SessionState | None = None
    below = seq
    while state is None:
        ckpt = db.scalars(
            select(CheckpointRecord)
            .where(CheckpointRecord.session_id == session_id, CheckpointRecord.seq <= below)
            .order_by(CheckpointRecord.seq.desc())
            .limit(1)
        ).first()
        if ckpt is None:
            meta = get_session(db, session_id)
            state = SessionState(session_id, {"name": meta["name"], "config": meta["config"]})
            break
        data = decode_checkpoint(ckpt.state)
        if checkpoint_queue.complete(db, session_id, data):
            state = SessionState.from_checkpoint(data)
        else:
            # Its left-out rows are not in the requests table as it was written: an
            # earlier checkpoint, then.
            log.warning("checkpoint %s of %s: left-out rows not found", ckpt.seq, session_id)
            below = ckpt.seq - 1
    for frame_seq, text in iter_frames(db, session_id, state.seq, seq):
        frame = fast_json.loads(text)
        state.apply(frame["type"], frame_seq, frame["data"])
    return state


def state_at_step(db: Session, session_id: str, step: int) -> SessionState:
    get_session(db, session_id)
    return state_at_seq(db, session_id, last_seq_at_step(db, session_id, step))


def request_rows(db: Session, session_id: str) -> list[dict[str, Any]]:
    rows = db.scalars(
        select(RequestRecord)
        .where(RequestRecord.session_id == session_id)
        .order_by(RequestRecord.arrival_step, RequestRecord.req_id)
    )
    return [
        {
            c: getattr(r, c)
            for c in (
                "req_id",
                "arrival_step",
                "arrival_t",
                "num_prompt_tokens",
                "max_tokens",
                "priority",
                "first_scheduled_step",
                "first_token_t",
                "finish_step",
                "finish_t",
                "finish_reason",
                "num_preemptions",
                "prefix_hit_tokens",
                "num_output_tokens",
            )
        }
        for r in rows
    ]
