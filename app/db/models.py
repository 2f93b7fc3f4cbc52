"""Tables of a recording: sessions, iterations (frame + summary columns), other frames,
requests, config changes and periodic checkpoints of the folded state. (The lab's tables,
in app/db/lab_models.py, register with the same metadata when this module is imported.)"""

from __future__ import annotations

from sqlalchemy import JSON, Float, ForeignKey, Index, Integer, LargeBinary, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db import lab_models  # noqa: F401  (the lab's tables join the metadata)
from app.db.base import Base
from protocol.wire import Knobs


def session_fk() -> ForeignKey:
    return ForeignKey("sessions.id", ondelete="CASCADE")


class SessionRecord(Base):
    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    source: Mapped[str] = mapped_column(String(64), default="local")
    runner: Mapped[str] = mapped_column(String(32), default="")
    model: Mapped[str] = mapped_column(String(300), default="")
    device: Mapped[str] = mapped_column(String(32), default="")
    simulated: Mapped[bool] = mapped_column(default=False)
    config: Mapped[Knobs] = mapped_column(JSON, default=dict)
    meta: Mapped[dict[str, object]] = mapped_column(JSON, default=dict)
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    num_steps: Mapped[int] = mapped_column(Integer, default=0)
    num_requests: Mapped[int] = mapped_column(Integer, default=0)
    last_seq: Mapped[int] = mapped_column(Integer, default=0)
    end_reason: Mapped[str | None] = mapped_column(String(16), nullable=True)
    """Why `ended_at` is set: `closed` (its producer closed it), `vanished` (its node was
    disconnected longer than `node_gone_after_s`: not final, like the next two),
    `shutdown` (the server
    stopped in order while it was live) or `orphaned` (the server died; marked at the next
    start). Only `closed` is final: frames arriving later reopen the others."""
    recorder: Mapped[str | None] = mapped_column(String(128), nullable=True)
    """`host:pid` of the server process that recorded it last (for orphan detection)."""


class IterationRecord(Base):
    __tablename__ = "iterations"

    session_id: Mapped[str] = mapped_column(String(128), session_fk(), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    seq: Mapped[int] = mapped_column(Integer)
    t_start: Mapped[float] = mapped_column(Float)
    duration: Mapped[float] = mapped_column(Float)
    num_scheduled_tokens: Mapped[int] = mapped_column(Integer)
    num_seqs: Mapped[int] = mapped_column(Integer)
    num_running: Mapped[int] = mapped_column(Integer)
    num_waiting: Mapped[int] = mapped_column(Integer)
    kv_used: Mapped[int] = mapped_column(Integer)
    num_preempted: Mapped[int] = mapped_column(Integer)
    num_finished: Mapped[int] = mapped_column(Integer)
    frame: Mapped[str] = mapped_column(Text)
    """Empty: the frame is in `frame_blocks`. (Recordings made before blocks: the frame as
    it went over the wire, plain or packed by app.db.frame_codec.)"""

    __table_args__ = (Index("ix_iterations_session_seq", "session_id", "seq"),)


class FrameBlockRecord(Base):
    """Consecutive iteration frames of one session, compressed together (app.db.frame_codec
    pack_block): a step repeats most of the step before, which a block's compression
    exploits and a row's cannot."""

    __tablename__ = "frame_blocks"

    session_id: Mapped[str] = mapped_column(String(128), session_fk(), primary_key=True)
    first_seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    last_seq: Mapped[int] = mapped_column(Integer)
    frames: Mapped[bytes] = mapped_column(LargeBinary)

    __table_args__ = (Index("ix_frame_blocks_session_last", "session_id", "last_seq"),)


class StepWaitRecord(Base):
    """Per recorded step, the numbers behind its waiting reasons (the frame's
    `waiting_detail`: gate, head, ...), a few hundred bytes where the frame may hold
    every waiting request's reason: request forensics reads a request's waits from these
    instead of the frames of every step it waited (app.records.request_life)."""

    __tablename__ = "step_waits"

    session_id: Mapped[str] = mapped_column(String(128), session_fk(), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    detail: Mapped[dict[str, object] | None] = mapped_column(JSON, nullable=True)
    """{} when nothing waited; None when requests waited but the frame has no numbers
    (e.g. a vLLM node): the frame is the only source then."""


class EventRecord(Base):
    """Every frame that is not an iteration (request, config, session marks)."""

    __tablename__ = "events"

    session_id: Mapped[str] = mapped_column(String(128), session_fk(), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    type: Mapped[str] = mapped_column(String(32))
    step: Mapped[int] = mapped_column(Integer)
    frame: Mapped[str] = mapped_column(Text)

    __table_args__ = (Index("ix_events_session_step", "session_id", "step"),)


ORDER = ("arrival_step", "arrival_seq", "req_id", "finish_step")
STATE = ("first_scheduled_step", "status", "num_preemptions", "ttft", "e2e")


class RequestRecord(Base):
    __tablename__ = "requests"

    session_id: Mapped[str] = mapped_column(String(128), session_fk(), primary_key=True)
    req_id: Mapped[str] = mapped_column(String(256), primary_key=True)
    arrival_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    arrival_t: Mapped[float | None] = mapped_column(Float, nullable=True)
    num_prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    max_tokens: Mapped[int] = mapped_column(Integer, default=0)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    first_scheduled_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    first_token_t: Mapped[float | None] = mapped_column(Float, nullable=True)
    finish_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    finish_t: Mapped[float | None] = mapped_column(Float, nullable=True)
    finish_reason: Mapped[str | None] = mapped_column(String(200), nullable=True)
    num_preemptions: Mapped[int] = mapped_column(Integer, default=0)
    prefix_hit_tokens: Mapped[int] = mapped_column(Integer, default=0)
    num_output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    arrival_seq: Mapped[int | None] = mapped_column(Integer, nullable=True)
    """Seq of its `arrived` frame: the exact arrival order (the table's default order)."""
    status: Mapped[str | None] = mapped_column(String(16), nullable=True)
    """FINISHED or REJECTED once done (None before; None on rows recorded before 0006)."""
    ttft: Mapped[float | None] = mapped_column(Float, nullable=True)
    e2e: Mapped[float | None] = mapped_column(Float, nullable=True)
    """Seconds, as the request table shows them (e2e of FINISHED rows only), stored so a
    recording's table sorts by them in the database (app.db.request_page)."""
    segments: Mapped[list[list[object]] | None] = mapped_column(JSON, nullable=True)
    """Its Gantt segments once done ([kind, start_step, end_step, tokens], the fold's, as
    the writer's fold has them at its end): the replay Gantt of any request (0009; None
    before, or where the writer did not fold the session: app.db.request_segments)."""

    __table_args__ = (
        # Each holds what a page's conditions and order read (0008), so the table at a
        # step is counted and paged from an index alone (app.db.request_page): the done
        # rows by finish step; every row in arrival order, with what tells done, never
        # scheduled, status and preemptions apart; the rows by TTFT or E2E, ties in
        # arrival order.
        Index(
            "ix_requests_session_finish",
            "session_id",
            "finish_step",
            "status",
            "num_preemptions",
            "ttft",
            "e2e",
        ),
        Index("ix_requests_session_order", "session_id", *ORDER, *STATE),
        Index("ix_requests_session_ttft", "session_id", "ttft", *ORDER),
        Index("ix_requests_session_e2e", "session_id", "e2e", *ORDER),
    )


class ConfigChangeRecord(Base):
    __tablename__ = "config_changes"

    session_id: Mapped[str] = mapped_column(String(128), session_fk(), primary_key=True)
    config_version: Mapped[int] = mapped_column(Integer, primary_key=True)
    step: Mapped[int] = mapped_column(Integer)
    changes: Mapped[dict[str, object]] = mapped_column(JSON)
    config: Mapped[Knobs] = mapped_column(JSON)


class CheckpointRecord(Base):
    """The folded session state as of frame `seq`, so seeking never reads from step 0."""

    __tablename__ = "checkpoints"

    session_id: Mapped[str] = mapped_column(String(128), session_fk(), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    step: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(Text)


class LiveRowsRecord(Base):
    """The rows of the requests live (not done) at the end of step `step` (frame `seq`),
    as the fold has them (app.db.live_rows): a recording's request table at a step folds
    from these, not from a whole checkpoint. Under a long waiting queue, the requests that
    never ran yet are left out (`pending` says how many; the requests table has them) and
    one is written at every step."""

    __tablename__ = "live_rows"

    session_id: Mapped[str] = mapped_column(String(128), session_fk(), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    step: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(Text)


class DoneCountsRecord(Base):
    """A recording's done counts (app.db.done_counts) through a step whose done rows are
    final, stored by the writer as they grow and when it ends (and by the importer): a
    replay's first seek reads one row and counts on from it instead of counting every
    done request. `last_seq`: the session's last frame when they were stored."""

    __tablename__ = "done_counts"

    session_id: Mapped[str] = mapped_column(String(128), session_fk(), primary_key=True)
    last_seq: Mapped[int] = mapped_column(Integer)
    counts: Mapped[bytes] = mapped_column(LargeBinary)


class SessionOwnerRecord(Base):
    """The producer that created a session over /ws/ingest: only the holder of the key it
    was issued (stored hashed) may resume it. Sessions without a row cannot be claimed."""

    __tablename__ = "session_owners"

    session_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    key_hash: Mapped[str] = mapped_column(String(64))
    node: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[float] = mapped_column(Float)
