"""SessionState: the fold of a session's frames into its current state.

Source-agnostic (local engine, remote ingest, replay): it reads only wire frames. The
hub keeps one per live session to answer late joiners with a snapshot; replay rebuilds
it from a checkpoint plus the frames after it. What it shows (snapshots, table rows,
latency summaries) is built in app/frames/snapshot.py.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any, cast

from app.frames import snapshot
from app.frames.block_table import BlockTable
from app.frames.checkpoint import Checkpoint
from app.frames.latencies import Latencies
from app.frames.rows import close_open, new_row
from app.frames.step_fold import fold_iteration
from protocol.codes import FrameType, RequestMark, RequestStatus, SessionEvent
from protocol.envelope import encode
from protocol.views import (
    ConfigMark,
    LatencySummary,
    RequestRow,
    SnapshotData,
    StepSummary,
    TableRow,
)
from protocol.wire import (
    ConfigData,
    IterationData,
    Knobs,
    RequestMarkData,
    SessionData,
    SessionMeta,
    WaitingDetail,
)

# The codes the fold compares with, as plain strings (see app.frames.step_fold).
ITERATION, REQUEST, CONFIG, SESSION = (
    FrameType.ITERATION.value, FrameType.REQUEST.value, FrameType.CONFIG.value,
    FrameType.SESSION.value,
)  # fmt: skip
ARRIVED, REJECTED_MARK, FIRST_TOKEN, SCHEDULED, FINISHED_MARK, ABORTED = (
    RequestMark.ARRIVED.value, RequestMark.REJECTED.value, RequestMark.FIRST_TOKEN.value,
    RequestMark.SCHEDULED.value, RequestMark.FINISHED.value, RequestMark.ABORTED.value,
)  # fmt: skip
FINISHED, REJECTED = RequestStatus.FINISHED.value, RequestStatus.REJECTED.value

HISTORY_STEPS = 2000
MAX_DONE_ROWS = 500
"""Finished/rejected rows kept in the fold (the oldest are dropped: they stay in the
database's requests table). Bounds memory, snapshots and checkpoints of long sessions
(a checkpoint is mostly these rows: 2000 of them made checkpoints most of a recording)."""


class SessionState:
    def __init__(self, session: str, meta: Mapping[str, Any] | None = None) -> None:
        self.session = session
        self.meta: SessionMeta = cast(SessionMeta, dict(meta or {}))
        self.seq = 0
        self.step = -1
        self.t = 0.0
        self.config: Knobs = dict(self.meta.get("config", {}))
        self.config_version = 0
        self.config_marks: list[ConfigMark] = []
        self.paused = False
        self.simulated = bool(self.meta.get("simulated", False))
        self.requests: dict[str, RequestRow] = {}
        self.blocks = BlockTable()
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
        self.latencies = Latencies()
        self._done: deque[str] = deque()
        self.dropped_rows = 0
        self.waiting_detail: WaitingDetail = {}
        """The numbers behind the latest step's waiting reasons (engine.waiting)."""
        self.in_flight: set[str] = set()
        """Async scheduling: requests with output placeholders after the latest step."""

    # ------------------------------------------------------------------ fold
    def apply(self, frame_type: str, seq: int, data: Mapping[str, Any]) -> None:
        """Fold one frame (`data` as validated: protocol.wire's shape for its type)."""
        self.seq = seq
        if frame_type == ITERATION:
            fold_iteration(self, cast(IterationData, data))
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
        if data.get("event") == SessionEvent.FAILED:
            # The engine stopped where vLLM's would (engine.faults): kept with the meta,
            # so a late joiner's snapshot says so too.
            failure = {k: data.get(k) for k in ("step", "assertion", "detail")}
            self.meta.update(cast(SessionMeta, {"failure": failure}))
            return
        self.meta.update(cast(SessionMeta, {k: v for k, v in data.items() if k != "event"}))
        self.paused = bool(data.get("paused", self.paused))
        if data.get("event") == SessionEvent.OPENED and not self.config:
            self.config = dict(data.get("config") or {})
            self.simulated = bool(data.get("simulated", self.simulated))

    def row(self, req: str) -> RequestRow:
        """`req`'s row (a new one, waiting since the next step, if it has none yet)."""
        row = self.requests.get(req)
        if row is None:
            row = self.requests[req] = new_row(req, max(self.step + 1, 0), self.t)
        return row

    def _apply_request(self, d: RequestMarkData) -> None:
        kind, req, t = d["kind"], d["req"], d["t"]
        detail = d.get("detail", {})
        if kind == ARRIVED:
            row = self.row(req)
            row["num_prompt_tokens"] = row["num_tokens"] = detail.get("num_prompt_tokens") or 0
            row["max_tokens"] = detail.get("max_tokens") or 0
            row["priority"] = detail.get("priority") or 0
            row["arrived_step"], row["arrived_t"] = d["step"], t
            row["segments"][0][1] = d["step"]
            self.totals["prompt_tokens"] += row["num_prompt_tokens"]
        elif kind == REJECTED_MARK:
            row = self.row(req)
            row["status"] = REJECTED
            row["finish_reason"] = detail.get("reason", "rejected")
            row["finish_step"], row["segments"] = d["step"], []
            self._retire(req)
        elif kind == FIRST_TOKEN:
            row = self.row(req)
            row["first_token_t"] = t
            self.latencies.ttft.append(round(t - row["arrived_t"], 6))
        elif kind == SCHEDULED:
            row = self.row(req)
            self.latencies.queue.append(round(t - row["arrived_t"], 6))
        elif kind in (FINISHED_MARK, ABORTED):
            row = self.row(req)
            row["status"] = FINISHED
            row["finish_reason"] = detail.get("reason", "abort")
            row["finish_step"] = d["step"]
            row["finish_t"] = t
            close_open(row, d["step"])
            self.latencies.last_token_t.pop(req, None)
            if kind == FINISHED_MARK:
                self.latencies.e2e.append(round(t - row["arrived_t"], 6))
            self._retire(req)

    def _retire(self, req: str) -> None:
        self._done.append(req)
        while len(self._done) > MAX_DONE_ROWS:
            old = self._done.popleft()
            row = self.requests.get(old)
            if row is not None and row["status"] in (FINISHED, REJECTED):
                del self.requests[old]
                self.dropped_rows += 1

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
            "blocks": self.blocks.rows(),
            "history": list(self.history),
            "totals": self.totals,
            "kv_peak": self.kv_peak,
            "last_token_t": self.latencies.last_token_t,
            "done": list(self._done),
            "dropped_rows": self.dropped_rows,
            "waiting_detail": self.waiting_detail,
            "in_flight": sorted(self.in_flight),
            "_ttft": list(self.latencies.ttft),
            "_itl": list(self.latencies.itl),
            "_queue": list(self.latencies.queue),
            "_e2e": list(self.latencies.e2e),
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
        state.blocks = BlockTable.from_rows(data["blocks"])
        state.history.extend(data["history"])
        latencies = state.latencies
        latencies.last_token_t = dict(data["last_token_t"])
        state._done.extend(data.get("done", ()))
        state.dropped_rows = int(data.get("dropped_rows", 0))
        state.waiting_detail = data.get("waiting_detail", {}).copy()
        state.in_flight = set(data.get("in_flight", ()))
        latencies.ttft.extend(data["_ttft"])
        latencies.itl.extend(data["_itl"])
        latencies.queue.extend(data["_queue"])
        latencies.e2e.extend(data["_e2e"])
        return state

    # ---------------------------------------------------------------- views
    def snapshot_json(self, compact: bool = False, columns: bool = False) -> str:
        """snapshot() as JSON text, its blocks from their cache (a pool of 80,000 blocks
        re-encoded whole would cost ~60 ms a call)."""
        snap = self.snapshot(compact=compact, columns=columns, with_blocks=False)
        return encode(snap)[:-1] + ',"blocks":' + self.blocks.json() + "}"

    def snapshot(
        self, compact: bool = False, columns: bool = False, with_blocks: bool = True
    ) -> SnapshotData:
        """The state for a late joiner (app/frames/snapshot.py)."""
        return snapshot.build(self, compact=compact, columns=columns, with_blocks=with_blocks)

    def request_rows(self) -> list[TableRow]:
        """Table rows (app/frames/snapshot.py)."""
        return snapshot.request_rows(self)

    def latency_summary(self) -> LatencySummary:
        """Latency quantiles and totals (app/frames/snapshot.py)."""
        return snapshot.latency_summary(self)

    def latency_samples(self) -> dict[str, list[float]]:
        """The latest LATENCY_SAMPLES of each latency, in seconds."""
        return self.latencies.samples()
