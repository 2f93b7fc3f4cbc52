"""Checkpoint payloads: JSON, stored zlib-compressed (base64, prefix `z1:`), because a
checkpoint repeats most of the state every few hundred frames. Plain JSON still reads."""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

PREFIX = "z1:"


def encode_checkpoint(state: dict[str, Any]) -> str:
    raw = json.dumps(state, separators=(",", ":")).encode()
    return PREFIX + base64.b64encode(zlib.compress(raw, 1)).decode("ascii")


def decode_checkpoint(text: str) -> dict[str, Any]:
    if text.startswith(PREFIX):
        text = zlib.decompress(base64.b64decode(text[len(PREFIX) :])).decode()
    data: dict[str, Any] = json.loads(text)
    return data
