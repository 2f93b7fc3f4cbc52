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
    blocks: list[BlockChange]
    history: list[StepSummary]
    totals: dict[str, int]
    kv_peak: int
    last_token_t: dict[str, float]
    _ttft: list[float]
    _itl: list[float]
    _queue: list[float]
    _e2e: list[float]


class Checkpoint(_CheckpointBase, total=False):
    """A SessionState as JSON (SessionState.to_checkpoint), stored every few hundred
    frames: a seek folds from the nearest. Older checkpoints lack the optional keys."""

    done: list[str]
    dropped_rows: int
    waiting_detail: WaitingDetail
    in_flight: list[str]
