"""What one request needs from a stored iteration frame, without parsing all of it.

Frames are stored exactly as sent: compact JSON laid out by protocol.frames (the
same key order for every producer). A frame of a busy step is tens of kilobytes (every
scheduled row, every waiting request's reason); one request's share of it is a few
dozen bytes. So the slices it needs are found by their keys and decoded alone
(`JSONDecoder.raw_decode` from that offset): the request's scheduled row, its waiting
reason, the small lists (preempted, finished, sampled, block changes) and maps. A frame
not in that layout (None) is parsed whole by the caller.

The key patterns cannot occur inside a JSON string (a quote there is escaped), and a
request id used as a map key is followed by `:"` or a digit, never by `:[` or `:{`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypedDict

from protocol.wire import BlockChange, PreemptedRow, ReqReason, ScheduledRow, WaitingDetail

_DECODER = json.JSONDecoder()
_scan: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]
"""The C scanner behind json.loads: (value, end) of the JSON value at an offset."""
_DATA = '"data":{"step":'


class _StepSliceBase(TypedDict):
    step: int
    t_start: float
    duration: float
    scheduled: list[ScheduledRow]
    preempted: list[PreemptedRow]
    finished: list[ReqReason]
    sampled: list[str]
    blocks: list[BlockChange]
    waiting_reasons: dict[str, str]


class StepSlice(_StepSliceBase, total=False):
    """What one request's life reads of an iteration frame (protocol.wire.IterationData's
    keys); `scheduled` and `waiting_reasons` may hold only that request's entries."""

    scheduled_at: int
    """Where the whole `scheduled` list starts in the frame's text (all_scheduled)."""
    accepted: dict[str, int]
    appended: dict[str, int]
    placeholders: dict[str, int]
    waiting_detail: WaitingDetail
    updated_step: int | None
    waiting_default: str
    """Every request waiting at the step but those `waiting_reasons` names has this
    reason (absent: `waiting_reasons` names them all)."""


def _value(text: str, key: str, start: int) -> Any:
    """The JSON value after the first `key` (a `"name":` pattern) at or after `start`;
    None if absent."""
    at = text.find(key, start)
    if at < 0:
        return None
    return _scan(text, at + len(key) - 1 if key[-1] in "[{" else at + len(key))[0]


def request_slice(text: str, req: str, needle: str) -> StepSlice | None:
    """The frame's data with `scheduled` holding only `req`'s row (`scheduled_all` says
    where the whole list starts, for `all_scheduled`) and `waiting_reasons` only `req`'s
    reason (and the step's `waiting_default`, if it has one). `needle` is
    json.dumps(req)."""
    base = text.find(_DATA)
    if base < 0:
        return None
    step, _ = _scan(text, base + len(_DATA))
    sched_at = text.find('"scheduled":[', base)
    sched_end = text.find('],"new":[', sched_at)
    reasons_at = text.find('"waiting_reasons":{', sched_end)
    if sched_at < 0 or sched_end < 0 or reasons_at < 0:
        return None
    row_at = text.find('{"req":' + needle + ",", sched_at, sched_end)
    scheduled = [_scan(text, row_at)[0]] if row_at >= 0 else []
    reasons: dict[str, str] = {}
    reasons_end = text.find('},"config_version":', reasons_at)
    at = text.find(needle + ':"', reasons_at, reasons_end if reasons_end >= 0 else None)
    if at >= 0:
        reasons[req] = _scan(text, at + len(needle) + 1)[0]
    tail = reasons_end if reasons_end >= 0 else reasons_at
    out: StepSlice = {
        "step": step,
        "t_start": _value(text, '"t_start":', base),
        "duration": _value(text, '"duration":', base),
        "scheduled": scheduled,
        "scheduled_at": sched_at,
        "preempted": _value(text, '"preempted":[', sched_end) or [],
        "finished": _value(text, '"finished":[', sched_end) or [],
        "sampled": _value(text, '"sampled":[', sched_end) or [],
        "blocks": _value(text, '"blocks":[', sched_end) or [],
        "waiting_reasons": reasons,
        "accepted": _value(text, '"accepted":{', tail) or {},
        "appended": _value(text, '"appended":{', tail) or {},
        "placeholders": _value(text, '"placeholders":{', tail) or {},
        "waiting_detail": _value(text, '"waiting_detail":{', tail) or WaitingDetail(),
    }
    if text.find('"updated_step":', tail) >= 0:  # absent in recordings made before it
        out["updated_step"] = _value(text, '"updated_step":', tail)
    default = _value(text, '"waiting_default":', tail)
    if default is not None:
        out["waiting_default"] = default
    return out


def seq_of(text: str) -> int | None:
    """The frame's `seq` (the envelope's, written before its data)."""
    at = text.find('"seq":')
    if at < 0:
        return None
    seq = _scan(text, at + len('"seq":'))[0]
    return seq if isinstance(seq, int) else None


def all_scheduled(text: str, at: int) -> list[ScheduledRow]:
    """The whole `scheduled` list of a frame (`at`: where `"scheduled":[` starts)."""
    rows: list[ScheduledRow] = _scan(text, at + len('"scheduled":'))[0]
    return rows
