"""SessionState: the fold of a session's frames into its current state.

Source-agnostic (local engine, remote ingest, replay): it reads only wire frames. The
hub keeps one per live session to answer late joiners with a snapshot; replay rebuilds
it from a checkpoint plus the frames after it. What it shows (snapshots, table rows,
latency summaries) is built in app/protocol/snapshot.py.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any, cast

from app.protocol import snapshot
from app.protocol.checkpoint import Checkpoint
from protocol.codes import BlockState, FrameType, Phase, RequestMark, RequestStatus
from protocol.envelope import encode
from protocol.views import (
    ConfigMark,
    LatencySummary,
    RequestRow,
    SnapshotData,
    StepSummary,
    TableRow,
)
from protocol.wire import ConfigData, IterationData, RequestMarkData, SessionData, SessionMeta

# The codes the fold compares with, as plain strings: the fold runs for every frame, and
# reading an enum member off its class costs ~200 ns in Python 3.11 (a global: ~35 ns).
ITERATION, REQUEST, CONFIG, SESSION = (
    FrameType.ITERATION.value, FrameType.REQUEST.value, FrameType.CONFIG.value,
    FrameType.SESSION.value,
)  # fmt: skip
ARRIVED, REJECTED_MARK, FIRST_TOKEN, SCHEDULED, FINISHED_MARK, ABORTED = (
    RequestMark.ARRIVED.value, RequestMark.REJECTED.value, RequestMark.FIRST_TOKEN.value,
    RequestMark.SCHEDULED.value, RequestMark.FINISHED.value, RequestMark.ABORTED.value,
)  # fmt: skip
WAITING, RUNNING, PREEMPTED, FINISHED, REJECTED = (
    RequestStatus.WAITING.value, RequestStatus.RUNNING.value, RequestStatus.PREEMPTED.value,
    RequestStatus.FINISHED.value, RequestStatus.REJECTED.value,
)  # fmt: skip
DECODE, FREE = Phase.DECODE.value, BlockState.FREE.value

HISTORY_STEPS = 2000
MAX_DONE_ROWS = 500
"""Finished/rejected rows kept in the fold (the oldest are dropped: they stay in the
database's requests table). Bounds memory, snapshots and checkpoints of long sessions
(a checkpoint is mostly these rows: 2000 of them made checkpoints most of a recording)."""
LATENCY_SAMPLES = 4096
PLAN_STEPS = 256
"""Only the latest steps keep their full plan ({req: n}) in the history (the step table)."""


class SessionState:
    def __init__(self, session: str, meta: Mapping[str, Any] | None = None) -> None:
        self.session = session
        self.meta: SessionMeta = cast(SessionMeta, dict(meta or {}))
        self.seq = 0
        self.step = -1
        self.t = 0.0
        self.config: dict[str, Any] = dict(self.meta.get("config", {}))
        self.config_version = 0
        self.config_marks: list[ConfigMark] = []
        self.paused = False
        self.simulated = bool(self.meta.get("simulated", False))
        self.requests: dict[str, RequestRow] = {}
        self.blocks: dict[int, tuple[Any, ...]] = {}
        """block id -> (id, state, owner, ref_cnt): tuples of plain values, which the garbage
        collector stops tracking (80,000 lists would make every full collection ~60 ms)."""
        self._blocks_text: list[str] | None = None
        """Each block's JSON, kept up to date once a snapshot asked for it (a pool of 80,000
        blocks is ~2 MB of JSON: re-encoding it whole for every poll would cost ~60 ms)."""
        self.history: deque[StepSummary] = deque(maxlen=HISTORY_STEPS)
        self.totals = {
            "steps": 0,
            "scheduled_tokens": 0,
            "output_tokens": 0,
            "prompt_tokens": 0,
            "preemptions": 0,
            "prefix_hit_tokens": 0,
        }
        self.kv_peak = 0
        self._ttft: deque[float] = deque(maxlen=LATENCY_SAMPLES)
        self._itl: deque[float] = deque(maxlen=LATENCY_SAMPLES)
        self._queue: deque[float] = deque(maxlen=LATENCY_SAMPLES)
        self._e2e: deque[float] = deque(maxlen=LATENCY_SAMPLES)
        self._last_token_t: dict[str, float] = {}
        self._done: deque[str] = deque()
        self.dropped_rows = 0
        self.waiting_detail: dict[str, Any] = {}
        """The numbers behind the latest step's waiting reasons (engine.waiting)."""
        self._in_flight: set[str] = set()
        """Async scheduling: requests with output placeholders after the latest step."""

    # ------------------------------------------------------------------ fold
    def apply(self, frame_type: str, seq: int, data: Mapping[str, Any]) -> None:
        """Fold one frame (`data` as validated: protocol.wire's shape for its type)."""
        self.seq = seq
        if frame_type == ITERATION:
            self._apply_iteration(cast(IterationData, data))
        elif frame_type == REQUEST:
            self._apply_request(cast(RequestMarkData, data))
        elif frame_type == CONFIG:
            self._apply_config(cast(ConfigData, data))
        elif frame_type == SESSION:
            self._apply_session(cast(SessionData, data))

    def _apply_config(self, data: ConfigData) -> None:
        self.config = dict(data["config"])
        self.config_version = data["config_version"]
        self.config_marks.append(
            {"step": data["step"], "changes": data["changes"], "version": data["config_version"]}
        )

    def _apply_session(self, data: SessionData) -> None:
        self.meta.update(cast(SessionMeta, {k: v for k, v in data.items() if k != "event"}))
        self.paused = bool(data.get("paused", self.paused))
        if data.get("event") == "opened" and not self.config:
            self.config = dict(data.get("config") or {})
            self.simulated = bool(data.get("simulated", self.simulated))

    def _row(self, req: str) -> RequestRow:
        row = self.requests.get(req)
        if row is None:
            row = self.requests[req] = {
                "req": req,
                "status": WAITING,
                "num_prompt_tokens": 0,
                "num_tokens": 0,
                "num_computed_tokens": 0,
                "max_tokens": 0,
                "priority": 0,
                "num_preemptions": 0,
                "prefix_hit": 0,
                "arrived_step": max(self.step + 1, 0),
                "arrived_t": self.t,
                "first_scheduled_step": None,
                "first_token_t": None,
                "last_token_t": None,
                "finish_t": None,
                "finish_step": None,
                "finish_reason": None,
                "waiting_reason": None,
                "num_draft_tokens": 0,
                "num_accepted_tokens": 0,
                "placeholders": 0,
                "segments": [["waiting", max(self.step + 1, 0), None, 0]],
            }
        return row

    def _apply_request(self, d: RequestMarkData) -> None:
        kind, req, t = d["kind"], d["req"], d["t"]
        detail = d.get("detail", {})
        if kind == ARRIVED:
            row = self._row(req)
            row["num_prompt_tokens"] = row["num_tokens"] = detail.get("num_prompt_tokens") or 0
            row["max_tokens"] = detail.get("max_tokens") or 0
            row["priority"] = detail.get("priority") or 0
            row["arrived_step"], row["arrived_t"] = d["step"], t
            row["segments"][0][1] = d["step"]
            self.totals["prompt_tokens"] += row["num_prompt_tokens"]
        elif kind == REJECTED_MARK:
            row = self._row(req)
            row["status"] = REJECTED
            row["finish_reason"] = detail.get("reason", "rejected")
            row["finish_step"], row["segments"] = d["step"], []
            self._retire(req)
        elif kind == FIRST_TOKEN:
            row = self._row(req)
            row["first_token_t"] = t
            self._ttft.append(round(t - row["arrived_t"], 6))
        elif kind == SCHEDULED:
            row = self._row(req)
            self._queue.append(round(t - row["arrived_t"], 6))
        elif kind in (FINISHED_MARK, ABORTED):
            row = self._row(req)
            row["status"] = FINISHED
            row["finish_reason"] = detail.get("reason", "abort")
            row["finish_step"] = d["step"]
            row["finish_t"] = t
            self._close_open(row, d["step"])
            self._last_token_t.pop(req, None)
            if kind == FINISHED_MARK:
                self._e2e.append(round(t - row["arrived_t"], 6))
            self._retire(req)

    def _retire(self, req: str) -> None:
        self._done.append(req)
        while len(self._done) > MAX_DONE_ROWS:
            old = self._done.popleft()
            row = self.requests.get(old)
            if row is not None and row["status"] in (FINISHED, REJECTED):
                del self.requests[old]
                self.dropped_rows += 1

    def _close_open(self, row: RequestRow, step: int) -> None:
        last = row["segments"][-1] if row["segments"] else None
        if last is not None and last[2] is None:
            if step - 1 < last[1]:
                row["segments"].pop()
            else:
                last[2] = step - 1

    def _apply_iteration(self, d: IterationData) -> None:
        step = d["step"]
        self.step = step
        t_end = round(d["t_start"] + d["duration"], 6)  # µs: no float noise in checkpoints
        self.t = t_end
        totals = self.totals
        totals["steps"] += 1
        totals["scheduled_tokens"] += d["budget"]["used"]
        for req in d["arrived"]:
            self._row(req)
        for item in d["scheduled"]:
            row = self._row(item["req"])
            if row["status"] != RUNNING:
                self._close_open(row, step)
                row["status"] = RUNNING
                if row["first_scheduled_step"] is None:
                    row["first_scheduled_step"] = step
                    row["prefix_hit"] = item["prefix_hit"]
                totals["prefix_hit_tokens"] += item["prefix_hit"]
            row["waiting_reason"] = None
            row["num_computed_tokens"] = item["start"] + item["n"]
            if item.get("spec"):
                row["num_draft_tokens"] = row.get("num_draft_tokens", 0) + item["spec"]
            segs = row["segments"]
            last = segs[-1] if segs else None
            if (
                item["phase"] == DECODE
                and last is not None
                and last[0] == DECODE
                and last[2] == step - 1
            ):
                last[2] = step
                last[3] += item["n"]
            else:
                segs.append([item["phase"], step, step, item["n"]])
        for p in d["preempted"]:
            row = self._row(p["req"])
            row["status"] = PREEMPTED
            row["num_preemptions"] += 1
            row["num_computed_tokens"] = 0
            row["segments"].append(["preempted", step, None, p["tokens_lost"]])
            totals["preemptions"] += 1
        appended = d.get("appended", {})
        for req in d["sampled"]:
            row = self._row(req)
            n = appended.get(req, 1)
            row["num_tokens"] += n
            totals["output_tokens"] += n
            prev = self._last_token_t.get(req)
            if prev is not None:
                self._itl.append(round(t_end - prev, 6))
            self._last_token_t[req] = t_end
            row["last_token_t"] = t_end
        for f in d["finished"]:
            row = self._row(f["req"])
            row["status"], row["finish_reason"] = FINISHED, f["reason"]
            row["finish_step"] = step
            # The request's own `finished` mark follows with the same time; until it is
            # folded the row is finished already, so it has its finish time too.
            row["finish_t"] = t_end
        for req, reason in d["waiting_reasons"].items():
            waiting_row = self.requests.get(req)
            if waiting_row is not None:
                waiting_row["waiting_reason"] = reason
        self.waiting_detail = d.get("waiting_detail", {})
        accepted = d.get("accepted", {})
        for req, n in accepted.items():
            acc_row = self.requests.get(req)
            if acc_row is not None:
                acc_row["num_accepted_tokens"] = acc_row.get("num_accepted_tokens", 0) + n
        placeholders = d.get("placeholders", {})
        for req in self._in_flight - placeholders.keys():
            ph_row = self.requests.get(req)
            if ph_row is not None:
                ph_row["placeholders"] = 0
        for req, n in placeholders.items():
            self._row(req)["placeholders"] = n
        self._in_flight = set(placeholders)
        for block_id, state, owner, ref in d["blocks"]:
            self.blocks[block_id] = (block_id, state, owner, ref)
            if self._blocks_text is not None and block_id < len(self._blocks_text):
                self._blocks_text[block_id] = encode([block_id, state, owner, ref])
        kv = d["kv"]
        if not self.blocks or len(self.blocks) < kv["total"]:
            self._blocks_text = None
            for i in range(1, kv["total"] + 1):
                self.blocks.setdefault(i, (i, FREE, None, 0))
        self.kv_peak = max(self.kv_peak, kv["used"])
        self.simulated = d["simulated"]
        if len(self.history) >= PLAN_STEPS:
            # Older steps keep their totals for the charts, not their per-request plan.
            old = self.history[-PLAN_STEPS]
            old.pop("plan", None)
            old.pop("finished", None)
            old.pop("preempted_ids", None)
        self.history.append(
            {
                "step": step,
                "t": round(t_end, 6),
                "prefill": d["budget"]["prefill"],
                "decode": d["budget"]["decode"],
                "max_tokens": d["budget"]["max_tokens"],
                "seqs": len(d["scheduled"]),
                "max_seqs": d["budget"]["max_seqs"],
                "running": d["queues"]["running_end"],
                "waiting": d["queues"]["waiting_end"],
                "kv_used": kv["used_end"],
                "kv_cached": kv["cached_free"],
                "kv_total": kv["total"],
                "preempted": len(d["preempted"]),
                "plan": {i["req"]: i["n"] for i in d["scheduled"]},
                "updated_step": d.get("updated_step", step),
                "spec": d.get("spec_tokens", 0),
                "accepted": sum(accepted.values()),
                "padding": d.get("padding", 0),
                "finished": [f["req"] for f in d["finished"]],
                "preempted_ids": [p["req"] for p in d["preempted"]],
            }
        )

    # ----------------------------------------------------------- checkpoints
    def to_checkpoint(self) -> Checkpoint:
        """Everything needed to resume folding from here (JSON-serialisable)."""
        return {
            "session": self.session,
            "meta": self.meta,
            "seq": self.seq,
            "step": self.step,
            "t": self.t,
            "config": self.config,
            "config_version": self.config_version,
            "config_marks": self.config_marks,
            "paused": self.paused,
            "simulated": self.simulated,
            "requests": self.requests,
            "blocks": [list(self.blocks[k]) for k in sorted(self.blocks)],
            "history": list(self.history),
            "totals": self.totals,
            "kv_peak": self.kv_peak,
            "last_token_t": self._last_token_t,
            "done": list(self._done),
            "dropped_rows": self.dropped_rows,
            "waiting_detail": self.waiting_detail,
            "in_flight": sorted(self._in_flight),
            "_ttft": list(self._ttft),
            "_itl": list(self._itl),
            "_queue": list(self._queue),
            "_e2e": list(self._e2e),
        }

    @classmethod
    def from_checkpoint(cls, data: Checkpoint) -> SessionState:
        """Takes ownership of `data` (freshly parsed JSON): nothing is copied."""
        state = cls(data["session"], data["meta"])
        state.seq, state.step, state.t = data["seq"], data["step"], data["t"]
        state.config, state.config_version = data["config"], data["config_version"]
        state.config_marks = data["config_marks"]
        state.paused, state.simulated = data["paused"], data["simulated"]
        state.requests, state.totals, state.kv_peak = (
            data["requests"], data["totals"], data["kv_peak"]
        )  # fmt: skip
        state.blocks = {b[0]: tuple(b) for b in data["blocks"]}
        state.history.extend(data["history"])
        state._last_token_t = dict(data["last_token_t"])
        state._done.extend(data.get("done", ()))
        state.dropped_rows = int(data.get("dropped_rows", 0))
        state.waiting_detail = dict(data.get("waiting_detail", {}))
        state._in_flight = set(data.get("in_flight", ()))
        state._ttft.extend(data["_ttft"])
        state._itl.extend(data["_itl"])
        state._queue.extend(data["_queue"])
        state._e2e.extend(data["_e2e"])
        return state

    # ---------------------------------------------------------------- views
    def blocks_json(self) -> str:
        """The snapshot's `blocks` as JSON text, from the per-block cache."""
        texts = self._blocks_text
        if texts is None or len(texts) != len(self.blocks) + 1:
            ids = sorted(self.blocks)
            texts = [""] + [encode(self.blocks[k]) for k in ids]
            if ids == list(range(1, len(ids) + 1)):  # indexable by block id: keep it
                self._blocks_text = texts
        return "[" + ",".join(texts[1:]) + "]"

    def snapshot_json(self, compact: bool = False, columns: bool = False) -> str:
        """snapshot() as JSON text, its blocks from their cache (a pool of 80,000 blocks
        re-encoded whole would cost ~60 ms a call)."""
        snap = self.snapshot(compact=compact, columns=columns, with_blocks=False)
        return encode(snap)[:-1] + ',"blocks":' + self.blocks_json() + "}"

    def snapshot(
        self, compact: bool = False, columns: bool = False, with_blocks: bool = True
    ) -> SnapshotData:
        """The state for a late joiner (app/protocol/snapshot.py)."""
        return snapshot.build(self, compact=compact, columns=columns, with_blocks=with_blocks)

    def request_rows(self) -> list[TableRow]:
        """Table rows (app/protocol/snapshot.py)."""
        return snapshot.request_rows(self)

    def latency_summary(self) -> LatencySummary:
        """Latency quantiles and totals (app/protocol/snapshot.py)."""
        return snapshot.latency_summary(self)

    def latency_samples(self) -> dict[str, list[float]]:
        """The latest LATENCY_SAMPLES of each latency, in seconds."""
        return {
            "ttft": list(self._ttft),
            "itl": list(self._itl),
            "queue": list(self._queue),
            "e2e": list(self._e2e),
        }
