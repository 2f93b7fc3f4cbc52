"""JSON on the hot paths of the dashboard and the recorder (each reads every frame; the
recorder writes checkpoints and live rows every few hundred): msgspec, two to nine times
faster than the standard library here, and the standard library wherever msgspec
refuses a value (NaN, a lone surrogate), so what is read is what `json` reads."""

from __future__ import annotations

import json
from typing import Any

import msgspec

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


def loads(text: str | bytes) -> Any:
    """json.loads: the same values, the same errors (ValueError) for what is not JSON."""
    try:
        return _decoder.decode(text)
    except msgspec.MsgspecError:
        return json.loads(text)


def dumps(value: Any) -> bytes:
    """Compact JSON as UTF-8 (non-ASCII as is; NaN and infinities as null: JSON has
    none). What msgspec cannot write (a lone surrogate) the standard library does."""
    try:
        return _encoder.encode(value)
    except (UnicodeEncodeError, TypeError, OverflowError):
        return json.dumps(value, separators=(",", ":")).encode()
