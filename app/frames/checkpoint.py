"""A SessionState stored as JSON (app.frames.fold: to_checkpoint, from_checkpoint;
app.db.checkpoint_codec compresses it), typed."""

from __future__ import annotations

from typing import TypedDict

from protocol.views import ConfigMark, RequestRow, StepSummary
from protocol.wire import BlockChange, Knobs, SessionMeta, WaitingDetail


class _CheckpointBase(TypedDict):
    session: str
    meta: SessionMeta
    seq: int
    step: int
    t: float
    config: Knobs
    config_version: int
    config_marks: list[ConfigMark]
    paused: bool
    simulated: bool
    requests: dict[str, RequestRow]
    blocks: list[BlockChange] | list[tuple[int, str, str | None, int]]
    """[id, state, owner, ref_cnt] by id (tuples as folded, lists as decoded)."""
    history: list[StepSummary]
    totals: dict[str, int]
    kv_peak: int
    last_token_t: dict[str, float]
    _ttft: list[float]
    _itl: list[float]
    _queue: list[float]
    _e2e: list[float]


class LeftOut(TypedDict):
    """A checkpoint's never-scheduled waiting rows, left to the requests table (under a
    long queue they are most of it, alike but for their arrival numbers): their count,
    the oldest's arrival step, their waiting reasons (the step's default and the
    exceptions), and the arrival seqs of the rows kept, by which the two merge back into
    the fold's order (app.db.checkpoint_queue)."""

    count: int
    from_step: int
    default: str | None
    exceptions: dict[str, str]
    seqs: list[int]


class Checkpoint(_CheckpointBase, total=False):
    """A SessionState as JSON (SessionState.to_checkpoint), stored every few hundred
    frames: a seek folds from the nearest. Older checkpoints lack the optional keys."""

    done: list[str]
    dropped_rows: int
    waiting_detail: WaitingDetail
    in_flight: list[str]
    left_out: LeftOut
