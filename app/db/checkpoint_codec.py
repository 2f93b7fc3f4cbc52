"""Checkpoint payloads: JSON, stored zlib-compressed (base64, prefix `z1:`), because a
checkpoint repeats most of the state every few hundred frames. Plain JSON still reads.

CheckpointClock says when a session's next checkpoint is due: after at least MIN frames,
once the frames since the last one are RATIO times its size (so checkpoints stay under a
third of what a recording stores), and always by MAX (2 x MIN) frames: a seek never folds
more.

Under a long waiting queue most of a checkpoint is rows of requests never scheduled yet,
all alike but for their arrival numbers: such a row is stored as an index into
`pending_rows` (those numbers alone, in columns), only where rebuilding it gives the
very same row, and rebuilt on decode in its place (the fold's order is kept). A
checkpoint then costs about its running requests, not its queue. The recorder's writer
leaves them out altogether where the requests table gives them back (`left_out`:
app.db.recording_fold, app.db.checkpoint_queue)."""

from __future__ import annotations

import base64
import zlib
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from app import fast_json
from app.db.frame_codec import stored_size
from app.frames.rows import new_row
from protocol.codes import SegmentKind

if TYPE_CHECKING:
    from app.frames.checkpoint import Checkpoint, LeftOut

PREFIX = "z1:"
LEVEL = 1
"""zlib level: 6 took three times as long for a few per cent fewer bytes."""
PENDING_FIELDS = (
    "num_prompt_tokens", "num_tokens", "max_tokens", "priority", "arrived_step",
    "arrived_t", "waiting_reason",
)  # fmt: skip
"""What tells one never-scheduled waiting row from another (with its id)."""
_TEMPLATE: dict[str, Any] = {k: v for k, v in new_row("", 0, 0.0).items() if k != "req"}
_CONSTANT = tuple(k for k in _TEMPLATE if k not in PENDING_FIELDS and k != "segments")
_constant, _fields = itemgetter(*_CONSTANT), itemgetter(*PENDING_FIELDS)
_CONSTANT_VALUES = _constant(_TEMPLATE)
_ROW_KEYS = len(_TEMPLATE) + 1
_WAITING = SegmentKind.WAITING.value


def _is_plain_pending(req: str, row: Any) -> bool:
    """Whether `row` is exactly what plain_pending_row rebuilds from its fields."""
    try:
        if len(row) != _ROW_KEYS or row["req"] != req or _constant(row) != _CONSTANT_VALUES:
            return False
        return bool(row["segments"] == [[_WAITING, row["arrived_step"], None, 0]])
    except (KeyError, TypeError):
        return False


def plain_pending_row(req: str, fields: list[Any]) -> dict[str, Any]:
    """The fold's row of a request waiting, never scheduled, from its PENDING_FIELDS."""
    row: dict[str, Any] = new_row(req, 0, 0.0)  # type: ignore[assignment]
    row.update(zip(PENDING_FIELDS, fields, strict=True))
    row["segments"] = [[_WAITING, row["arrived_step"], None, 0]]
    return row


def encode_checkpoint(state: Checkpoint, left_out: LeftOut | None = None) -> str:
    """The stored form of a checkpoint (`state` is not changed). `left_out`: the
    never-scheduled rows `state` leaves to the requests table."""
    out: dict[str, Any] = dict(state)
    if left_out is not None:
        out["left_out"] = left_out
    pending: list[Any] = []
    requests: dict[str, Any] = {}
    for req, row in state["requests"].items():
        if row["first_scheduled_step"] is None and _is_plain_pending(req, row):
            requests[req] = len(pending)
            pending.append(list(_fields(row)))
        else:
            requests[req] = row
    if pending:
        out["requests"], out["pending_rows"] = requests, pending
    raw = fast_json.dumps(out)
    return PREFIX + base64.b64encode(zlib.compress(raw, LEVEL)).decode("ascii")


def decode_checkpoint(text: str) -> Checkpoint:
    """The checkpoint; one with `left_out` rows is completed from the requests table
    (app.db.checkpoint_queue) before a fold takes it."""
    if text.startswith(PREFIX):
        text = zlib.decompress(base64.b64decode(text[len(PREFIX) :])).decode()
    data: dict[str, Any] = fast_json.loads(text)
    pending = data.pop("pending_rows", None)
    if pending is not None:
        data["requests"] = {
            req: plain_pending_row(req, pending[row]) if type(row) is int else row
            for req, row in data["requests"].items()
        }
    return data  # type: ignore[return-value]


class CheckpointClock:
    """One session's checkpoint schedule (the recorder's writer and the importer)."""

    RATIO = 2.0

    def __init__(self, min_frames: int, max_frames: int | None = None) -> None:
        self.min_frames = min_frames
        self.max_frames = max_frames or 2 * min_frames
        self.frames = 0
        self.stored_bytes = 0
        self.last_size = 0

    def add(self, frame_type: str, text: str) -> None:
        """A frame stored (`text`: its text), counted as the bytes it stores
        (app.db.frame_codec). (A quarter of every frame's text, from before iteration
        frames went into blocks, counted ~1.7 times what they store: checkpoints and live
        rows were then as many bytes as the frames, not half.)"""
        self.frames += 1
        self.stored_bytes += stored_size(frame_type, text)

    def due(self) -> bool:
        if self.frames >= self.max_frames:
            return True
        return self.frames >= self.min_frames and self.stored_bytes >= self.RATIO * self.last_size

    def taken(self, size: int) -> None:
        self.frames = self.stored_bytes = 0
        self.last_size = size
