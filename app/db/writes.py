"""Writing frames into the recording tables (one transaction per batch)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, cast

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.orm import Session

from app.db.frame_codec import pack_block, pack_frame
from app.db.models import (
    CheckpointRecord,
    ConfigChangeRecord,
    EventRecord,
    FrameBlockRecord,
    IterationRecord,
    LiveRowsRecord,
    RequestRecord,
    SessionRecord,
    StepWaitRecord,
)
from protocol.codes import FrameType, RequestMark, SessionEvent
from protocol.wire import IterationData, RequestMarkData, SessionData

ENDED_MARKS = frozenset({RequestMark.FINISHED, RequestMark.ABORTED, RequestMark.REJECTED})
"""The request marks after which a request's Gantt segments are final (write_segments)."""
BLOCK_FRAMES = 128
"""Iteration frames per stored block at most: a seek decompresses at most a few blocks."""
BLOCK_BYTES = 256 * 1024
"""Frame text per stored block at most (a block holds one frame at least): a seek folds
a few frames, and under a full batch a frame is ~33 kB, so 128 of them were 4 MB to
decompress and split (~20 ms) for the 3 a seek wanted. On a 20,000-request flat-out
recording: 0.7 ms a block, 2.6% more bytes than 4 MB blocks (zlib's window is 32 kB)."""
PRELOAD_CHUNK = 400
"""Request rows read by one SELECT when a batch's rows are loaded up front."""


def _blocks(frames: list[tuple[int, str]]) -> list[list[tuple[int, str]]]:
    """(seq, text) in seq order cut into blocks of BLOCK_FRAMES and BLOCK_BYTES at most."""
    out: list[list[tuple[int, str]]] = []
    block: list[tuple[int, str]] = []
    size = 0
    for frame in frames:
        if block and (len(block) >= BLOCK_FRAMES or size + len(frame[1]) > BLOCK_BYTES):
            out.append(block)
            block, size = [], 0
        block.append(frame)
        size += len(frame[1]) + 1
    if block:
        out.append(block)
    return out


class Frame(NamedTuple):
    """One frame to record: its data (parsed) and its text (stored as it was sent)."""

    session: str
    type: str
    seq: int
    data: Mapping[str, Any]
    """Validated: protocol.wire's shape for its type."""
    text: str


class Checkpoint(NamedTuple):
    """A session's folded state as of frame `seq` (step `step`), encoded by
    app.db.checkpoint_codec: a seek folds at most the frames after it."""

    session: str
    seq: int
    step: int
    state: str


def _session_row(db: Session, cache: dict[str, SessionRecord], session: str) -> SessionRecord:
    rec = cache.get(session)
    if rec is None:
        rec = db.get(SessionRecord, session)
        if rec is None:
            rec = SessionRecord(
                id=session,
                started_at=time.time(),
                config={},
                meta={},
                name="",
                source="",
                runner="",
                model="",
                device="",
                simulated=False,
                num_steps=0,
                num_requests=0,
                last_seq=0,
            )
            db.add(rec)
            db.flush()
        cache[session] = rec
    return rec


def _apply_session_meta(rec: SessionRecord, data: SessionData) -> None:
    event = data.get("event")
    if event == SessionEvent.OPENED:
        # Sessions recorded before `model`/`device` were top-level carry them in `describe`.
        describe = data.get("describe") or {}
        rec.name = str(data.get("name") or "")[:200]
        rec.source = str(data.get("source") or "")[:64]
        rec.runner = str(data.get("runner") or "")[:32]
        rec.model = str(data.get("model") or describe.get("model") or "")[:300]
        rec.device = str(data.get("device") or describe.get("device") or "")[:32]
        rec.simulated = bool(data.get("simulated", False))
        rec.config = dict(data.get("config") or {})
        rec.meta = {k: v for k, v in data.items() if k != "event"}
        rec.started_at = float(data.get("started_at") or rec.started_at)
    elif event == SessionEvent.CLOSED:
        rec.ended_at, rec.end_reason = time.time(), "closed"


def _preload_requests(
    db: Session, cache: dict[tuple[str, str], RequestRecord], batch: Iterable[Frame]
) -> None:
    """Load the rows of every request the batch marks, a few hundred per SELECT: one
    `db.get` per request (one SELECT each, nearly all of them finding nothing: the
    request arrived in this batch) was most of a recording's write time. A key left out
    of `cache` has no row yet (_request_row makes it without asking again)."""
    wanted: dict[str, set[str]] = {}
    for f in batch:
        if f.type == FrameType.REQUEST and (f.session, f.data["req"]) not in cache:
            wanted.setdefault(f.session, set()).add(f.data["req"])
    for session, reqs in wanted.items():
        ids = sorted(reqs)
        for i in range(0, len(ids), PRELOAD_CHUNK):
            cond = RequestRecord.req_id.in_(ids[i : i + PRELOAD_CHUNK])
            rows = db.scalars(
                select(RequestRecord).where(RequestRecord.session_id == session, cond)
            )
            for row in rows:
                cache[(session, row.req_id)] = row


def _request_row(
    db: Session,
    cache: dict[tuple[str, str], RequestRecord],
    session: str,
    req_id: str,
    preloaded: bool = False,
) -> RequestRecord:
    """`preloaded`: every row the database holds for the batch is in `cache` already."""
    key = (session, req_id)
    row = cache.get(key)
    if row is None:
        row = None if preloaded else db.get(RequestRecord, key)
        if row is None:
            row = RequestRecord(
                session_id=session,
                req_id=req_id,
                num_prompt_tokens=0,
                max_tokens=0,
                priority=0,
                num_preemptions=0,
                prefix_hit_tokens=0,
                num_output_tokens=0,
                arrival_seq=0,
            )
            db.add(row)
        cache[key] = row
    return row


def _apply_request(row: RequestRecord, data: RequestMarkData, seq: int) -> bool:
    """Fold a request frame into its row; True if it was an arrival."""
    kind, detail = data["kind"], data.get("detail") or {}
    if row.arrival_step is None:
        # First seen (a rejection has no `arrived` mark): it arrived here, as the fold says.
        row.arrival_step, row.arrival_t, row.arrival_seq = data["step"], data["t"], seq
    if kind == RequestMark.ARRIVED:
        row.arrival_step, row.arrival_t, row.arrival_seq = data["step"], data["t"], seq
        row.num_prompt_tokens = int(detail.get("num_prompt_tokens") or 0)
        row.max_tokens = int(detail.get("max_tokens") or 0)
        row.priority = int(detail.get("priority") or 0)
        return True
    if kind == RequestMark.SCHEDULED and row.first_scheduled_step is None:
        row.first_scheduled_step = data["step"]
    elif kind == RequestMark.FIRST_TOKEN:
        row.first_token_t = data["t"]
        if row.arrival_t is not None:
            row.ttft = round(data["t"] - row.arrival_t, 6)
    elif kind == RequestMark.PREEMPTED:
        row.num_preemptions += 1
    elif kind in (RequestMark.FINISHED, RequestMark.ABORTED, RequestMark.REJECTED):
        row.finish_step, row.finish_t = data["step"], data["t"]
        row.finish_reason = str(detail.get("reason") or kind)[:200]
        outputs, cached = detail.get("num_output_tokens"), detail.get("num_cached_tokens")
        row.num_output_tokens = row.num_output_tokens if outputs is None else int(outputs)
        row.prefix_hit_tokens = row.prefix_hit_tokens if cached is None else int(cached)
        row.status = "REJECTED" if kind == RequestMark.REJECTED else "FINISHED"
        if kind != RequestMark.REJECTED and row.arrival_t is not None:
            row.e2e = round(data["t"] - row.arrival_t, 6)
    return False


def write_batch(
    db: Session,
    batch: Iterable[Frame],
    checkpoints: Iterable[Checkpoint],
    recorder: str | None = None,
) -> None:
    """`recorder`: the `host:pid` of the server recording (kept on each session row)."""
    with db.no_autoflush:
        _write_batch(db, batch, checkpoints, recorder)


def _write_batch(
    db: Session, batch: Iterable[Frame], checkpoints: Iterable[Checkpoint], recorder: str | None
) -> None:
    sessions: dict[str, SessionRecord] = {}
    requests: dict[tuple[str, str], RequestRecord] = {}
    iterations: list[dict[str, Any]] = []
    waits: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    blocks: dict[str, list[tuple[int, str]]] = {}
    batch = list(batch)
    _preload_requests(db, requests, batch)
    for session, frame_type, seq, data, text in batch:
        rec = _session_row(db, sessions, session)
        rec.last_seq = max(rec.last_seq, seq)
        if recorder is not None and rec.recorder != recorder:
            rec.recorder = recorder
        if rec.ended_at is not None and rec.end_reason != "closed":
            # Marked ended by a shutdown or as an orphan, and now continued (a producer
            # resuming after the restart): live again.
            rec.ended_at = rec.end_reason = None
        if frame_type == FrameType.ITERATION:
            it = cast(IterationData, data)
            step = it["step"]
            iterations.append(
                {
                    "session_id": session,
                    "step": step,
                    "seq": seq,
                    "t_start": it["t_start"],
                    "duration": it["duration"],
                    "num_scheduled_tokens": it["budget"]["used"],
                    "num_seqs": len(it["scheduled"]),
                    "num_running": it["queues"]["running_end"],
                    "num_waiting": it["queues"]["waiting_end"],
                    "kv_used": it["kv"]["used"],
                    "num_preempted": len(it["preempted"]),
                    "num_finished": len(it["finished"]),
                    "frame": "",
                }
            )
            blocks.setdefault(session, []).append((seq, text))
            waited = bool(it["waiting_reasons"]) or "waiting_default" in it
            detail = it.get("waiting_detail")
            waits.append(
                {
                    "session_id": session,
                    "step": step,
                    "detail": detail if detail else (None if waited else {}),
                }
            )
            rec.num_steps = max(rec.num_steps, step + 1)
            continue
        step = int(data["step"]) if "step" in data else rec.num_steps
        events.append(
            {
                "session_id": session,
                "seq": seq,
                "type": frame_type,
                "step": step,
                "frame": pack_frame(text),
            }
        )
        if frame_type == FrameType.SESSION:
            _apply_session_meta(rec, cast(SessionData, data))
        elif frame_type == FrameType.REQUEST:
            row = _request_row(db, requests, session, data["req"], preloaded=True)
            if _apply_request(row, cast(RequestMarkData, data), seq):
                rec.num_requests += 1
        elif frame_type == FrameType.CONFIG:
            db.merge(
                ConfigChangeRecord(
                    session_id=session,
                    config_version=data["config_version"],
                    step=data["step"],
                    changes=dict(data["changes"]),
                    config=dict(data["config"]),
                )
            )
    if iterations:
        db.execute(insert(IterationRecord), iterations)
        db.execute(
            insert(FrameBlockRecord),
            [
                {
                    "session_id": session,
                    "first_seq": frames[0][0],
                    "last_seq": frames[-1][0],
                    "frames": pack_block(frames),
                }
                for session, block in blocks.items()
                for frames in _blocks(sorted(block))
            ],
        )
        db.execute(insert(StepWaitRecord), waits)
    if events:
        db.execute(insert(EventRecord), events)
    for session, seq, step, state in checkpoints:
        _session_row(db, sessions, session)
        db.merge(CheckpointRecord(session_id=session, seq=seq, step=step, state=state))


def write_live_rows(db: Session, rows: Iterable[Checkpoint]) -> None:
    """Live rows (app.db.live_rows) of step ends, encoded: the same shape as checkpoints."""
    db.execute(
        insert(LiveRowsRecord),
        [{"session_id": s, "seq": seq, "step": step, "state": text} for s, seq, step, text in rows],
    )


def write_segments(db: Session, ended: Mapping[tuple[str, str], list[list[object]]]) -> None:
    """The Gantt segments of requests just done, as the writer's fold ends them (their
    rows were written by this batch or an earlier one)."""
    stmt = (
        update(RequestRecord)
        .where(
            RequestRecord.session_id == bindparam("s_id"),
            RequestRecord.req_id == bindparam("r_id"),
        )
        .values(segments=bindparam("segs"))
        .execution_options(synchronize_session=False)
    )
    db.connection().execute(
        stmt, [{"s_id": s, "r_id": r, "segs": segs} for (s, r), segs in ended.items()]
    )
