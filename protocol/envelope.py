"""The envelope every protocol v1 frame travels in (docs/protocol.md):
`{"v", "type", "session", "seq", "ts"?, "data"}`. Every sender builds it with `envelope()`,
the vLLM adapter included, so this module uses the standard library only.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from protocol.codes import MessageType

PROTOCOL_VERSION = 1


def encode(value: Any) -> str:
    """Compact JSON: what goes over every socket and into the recording."""
    return json.dumps(value, separators=(",", ":"))


def envelope(
    frame_type: str,
    session: str | None,
    seq: int | None,
    data_json: str,
    ts: float | None = None,
) -> str:
    """A frame as text: `data_json` (already encoded, so that each frame is encoded exactly
    once however many clients and listeners it reaches) of `frame_type`, number `seq` of
    `session`. `ts`: the wall-clock time the dashboard published it (omitted when None)."""
    stamp = "" if ts is None else f',"ts":{ts!r}'
    return (
        f'{{"v":{PROTOCOL_VERSION},"type":{encode(frame_type)},"session":{encode(session)},'
        f'"seq":{encode(seq)}{stamp},"data":{data_json}}}'
    )


class FrameText(NamedTuple):
    type: str
    seq: int
    data_json: str
    """The `data` part, as the sender encoded it."""


_HEAD = re.compile(r'\{"v":1,"type":"(\w+)","session":(?:"[^"]*"|null),"seq":(\d+)')
_DATA = ',"data":'


def split_frame(text: str) -> FrameText | None:
    """Type, seq and data text of a frame that `envelope()` built, read without parsing
    it (None for any other text): forwarding it then costs no second encode."""
    head = _HEAD.match(text)
    at = text.find(_DATA, head.end()) if head else -1
    if head is None or at < 0 or not text.endswith("}"):
        return None
    return FrameText(head.group(1), int(head.group(2)), text[at + len(_DATA) : -1])


def error_frame(detail: str) -> str:
    """An error answer on a viewer's socket (not a frame of any session)."""
    return envelope(MessageType.ERROR, None, None, encode({"detail": detail}))
