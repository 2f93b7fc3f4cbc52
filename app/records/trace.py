"""TraceBuilder: folds protocol frames into a Chrome JSON trace (opens in ui.perfetto.dev).

One process (the session), one thread track per request (queued / prefill / decode /
preempted slices, finish marks) and counter tracks per step. Times are the frames' own
(`t_start`, `duration`, request `t`, seconds since session start) in microseconds.
docs/export.md lists every track.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from protocol.codes import FrameType, Phase, RequestMark
from protocol.wire import ConfigData, IterationData, RequestMarkData

DECODE = Phase.DECODE.value
"""A plain string for the per-row loop (an enum member read off its class costs ~200 ns)."""

PID = 1
CATEGORY = "request"
# Detail keys too bulky for a trace's args pane.
BULKY_DETAIL = ("output_token_ids", "prompt_token_ids", "prompt_block_hashes")


def us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


@dataclass
class _DecodeRun:
    start: float
    end: float
    first_step: int
    last_step: int
    tokens: int


@dataclass
class _Track:
    """One request's track; slices on it are emitted in time order, never overlapping."""

    tid: int
    last_end: float = 0.0
    open_name: str | None = None
    """An open "queued" or "preempted" slice, closed when the request is scheduled."""
    open_since: float = 0.0
    open_args: dict[str, Any] = field(default_factory=dict)
    decode: _DecodeRun | None = None


class TraceBuilder:
    def __init__(self, process_name: str) -> None:
        self.events: list[dict[str, Any]] = [
            {
                "ph": "M",
                "name": "process_name",
                "pid": PID,
                "tid": 0,
                "args": {"name": process_name},
            },
        ]
        self.tracks: dict[str, _Track] = {}
        self.end = 0.0

    # ------------------------------------------------------------- tracks
    def track(self, req: str) -> _Track:
        track = self.tracks.get(req)
        if track is None:
            track = self.tracks[req] = _Track(len(self.tracks) + 1)
            self.events.append(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": PID,
                    "tid": track.tid,
                    "args": {"name": req},
                }
            )
            self.events.append(
                {
                    "ph": "M",
                    "name": "thread_sort_index",
                    "pid": PID,
                    "tid": track.tid,
                    "args": {"sort_index": track.tid},
                }
            )
        return track

    def _slice(
        self, track: _Track, name: str, start: float, end: float, args: dict[str, Any]
    ) -> None:
        # Frame times are rounded to the microsecond: clamp so slices never overlap.
        start = max(start, track.last_end)
        end = max(end, start)
        self.events.append(
            {
                "ph": "X",
                "name": name,
                "cat": CATEGORY,
                "pid": PID,
                "tid": track.tid,
                "ts": start,
                "dur": round(end - start, 3),
                "args": args,
            }
        )
        track.last_end = end

    def _instant(self, track: _Track, name: str, ts: float, args: dict[str, Any]) -> None:
        self.events.append(
            {
                "ph": "i",
                "s": "t",
                "name": name,
                "cat": CATEGORY,
                "pid": PID,
                "tid": track.tid,
                "ts": max(ts, track.last_end),
                "args": args,
            }
        )

    def _close_open(self, track: _Track, end: float) -> None:
        if track.open_name is not None:
            self._slice(track, track.open_name, track.open_since, end, track.open_args)
            track.open_name = None

    def _flush_decode(self, track: _Track) -> None:
        run = track.decode
        if run is not None:
            self._slice(
                track,
                "decode",
                run.start,
                run.end,
                {"tokens": run.tokens, "first_step": run.first_step, "last_step": run.last_step},
            )
            track.decode = None

    # ------------------------------------------------------------- frames
    def add(self, frame_type: str, data: Mapping[str, Any]) -> None:
        """Fold one recorded frame (validated when it was recorded: protocol.wire's shape)."""
        fold = FOLDS.get(frame_type)
        if fold is not None:
            fold(self, data)

    def _config(self, d: ConfigData) -> None:
        self.events.append(
            {
                "ph": "i",
                "s": "p",
                "name": f"config v{d['config_version']}",
                "cat": "config",
                "pid": PID,
                "tid": 0,
                "ts": self.end,
                "args": {"step": d["step"], "changes": d["changes"]},
            }
        )

    def _counter(self, name: str, ts: float, args: dict[str, int]) -> None:
        self.events.append({"ph": "C", "name": name, "pid": PID, "ts": ts, "args": args})

    def _iteration(self, d: IterationData) -> None:
        step, start = d["step"], us(d["t_start"])
        end = us(d["t_start"] + d["duration"])
        kv, queues, budget = d["kv"], d["queues"], d["budget"]
        self._counter("KV blocks", start, {"used": kv["used"], "cached": kv["cached_free"]})
        self._counter(
            "queue depth", start, {"running": queues["running"], "waiting": queues["waiting"]}
        )
        self._counter(
            "tokens per step", start, {"prefill": budget["prefill"], "decode": budget["decode"]}
        )
        accepted = d.get("accepted", {})
        if d.get("spec_tokens") or accepted:
            drafts = {"drafts": d.get("spec_tokens", 0), "accepted": sum(accepted.values())}
            self._counter("speculative decoding", start, drafts)
        if d.get("padding"):
            self._counter("static batching padding", start, {"padding": d["padding"]})
        # Preemption happens while this step is scheduled: the wait starts with the step.
        for p in d["preempted"]:
            track = self.track(p["req"])
            self._flush_decode(track)
            self._close_open(track, start)
            track.open_name, track.open_since = "preempted", start
            track.open_args = {"step": step, "tokens_lost": p["tokens_lost"]}
        for item in d["scheduled"]:
            track = self.track(item["req"])
            self._close_open(track, start)
            run = track.decode
            if item.get("spec"):
                # A draft-verifying step gets its own slice: drafts and how many held.
                self._flush_decode(track)
                args = {"tokens": item["n"], "drafts": item["spec"], "step": step}
                if item["req"] in accepted:
                    args["accepted"] = accepted[item["req"]]
                self._slice(track, f"decode + {item['spec']} drafts", start, end, args)
                continue
            if item["phase"] == DECODE:
                if run is not None and run.last_step == step - 1:
                    run.end, run.last_step = end, step
                    run.tokens += item["n"]
                    continue
                self._flush_decode(track)
                track.decode = _DecodeRun(start, end, step, step, item["n"])
                continue
            self._flush_decode(track)
            self._slice(
                track,
                "prefill",
                start,
                end,
                {
                    "tokens": item["n"],
                    "start": item["start"],
                    "step": step,
                    "prefix_hit": item["prefix_hit"],
                },
            )
        self.end = max(self.end, end)

    def _request(self, d: RequestMarkData) -> None:
        t = us(d["t"])
        mark = REQUEST_MARKS.get(d["kind"])
        if mark is not None:
            detail = {k: v for k, v in (d.get("detail") or {}).items() if k not in BULKY_DETAIL}
            mark(self, d, t, detail)
        self.end = max(self.end, t)

    def _arrived(self, d: RequestMarkData, t: float, detail: dict[str, Any]) -> None:
        track = self.track(d["req"])
        track.open_name, track.open_since = "queued", t
        track.open_args = {"arrival_step": d["step"], **detail}

    def _rejected(self, d: RequestMarkData, t: float, detail: dict[str, Any]) -> None:
        self._instant(self.track(d["req"]), "rejected", t, {"step": d["step"], **detail})

    def _ended(self, d: RequestMarkData, t: float, detail: dict[str, Any]) -> None:
        """finished or aborted: the open span closes, an instant names the mark."""
        track = self.track(d["req"])
        self._flush_decode(track)
        self._close_open(track, t)
        self._instant(track, d["kind"], t, {"step": d["step"], **detail})

    def finish(self) -> dict[str, Any]:
        """Close what is still open at the end of the recording; the trace as a dict."""
        for track in self.tracks.values():
            self._flush_decode(track)
            self._close_open(track, self.end)
        return {"traceEvents": self.events, "displayTimeUnit": "ms"}


FOLDS: dict[str, Callable[[TraceBuilder, Any], None]] = {
    FrameType.ITERATION.value: TraceBuilder._iteration,
    FrameType.REQUEST.value: TraceBuilder._request,
    FrameType.CONFIG.value: TraceBuilder._config,
}
"""What each recorded frame type adds to the trace (session frames add nothing)."""

REQUEST_MARKS: dict[str, Callable[[TraceBuilder, RequestMarkData, float, dict[str, Any]], None]] = {
    RequestMark.ARRIVED.value: TraceBuilder._arrived,
    RequestMark.REJECTED.value: TraceBuilder._rejected,
    RequestMark.FINISHED.value: TraceBuilder._ended,
    RequestMark.ABORTED.value: TraceBuilder._ended,
}
"""What each request mark adds to the trace (first_token and scheduled add nothing: the
spans come from the iteration frames)."""
