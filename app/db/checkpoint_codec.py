"""Checkpoint payloads: JSON, stored zlib-compressed (base64, prefix `z1:`), because a
checkpoint repeats most of the state every few hundred frames. Plain JSON still reads.

CheckpointClock says when a session's next checkpoint is due: after at least MIN frames,
once the frames since the last one are RATIO times its size (so checkpoints stay under a
third of what a recording stores), and always by MAX (2 x MIN) frames: a seek never folds
more."""

from __future__ import annotations

import base64
import json
import zlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.frames.checkpoint import Checkpoint

PREFIX = "z1:"


def encode_checkpoint(state: Checkpoint) -> str:
    raw = json.dumps(state, separators=(",", ":")).encode()
    return PREFIX + base64.b64encode(zlib.compress(raw, 6)).decode("ascii")


def decode_checkpoint(text: str) -> Checkpoint:
    if text.startswith(PREFIX):
        text = zlib.decompress(base64.b64decode(text[len(PREFIX) :])).decode()
    data: Checkpoint = json.loads(text)
    return data


STORED_FRAME_RATIO = 4
"""A frame's text is about this many times its stored size (app.db.frame_codec)."""


class CheckpointClock:
    """One session's checkpoint schedule (the recorder's writer and the importer)."""

    RATIO = 2.0

    def __init__(self, min_frames: int, max_frames: int | None = None) -> None:
        self.min_frames = min_frames
        self.max_frames = max_frames or 2 * min_frames
        self.frames = 0
        self.stored_bytes = 0
        self.last_size = 0

    def add(self, text: str) -> None:
        self.frames += 1
        self.stored_bytes += len(text) // STORED_FRAME_RATIO

    def due(self) -> bool:
        if self.frames >= self.max_frames:
            return True
        return self.frames >= self.min_frames and self.stored_bytes >= self.RATIO * self.last_size

    def taken(self, size: int) -> None:
        self.frames = self.stored_bytes = 0
        self.last_size = size
