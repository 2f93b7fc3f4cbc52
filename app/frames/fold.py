"""SessionState: the fold of a session's frames into its current state.

Source-agnostic (local engine, remote ingest, replay): it reads only wire frames, and each
frame type is folded in one place here (FOLDS). The hub keeps one per live session to
answer late joiners with a snapshot; replay rebuilds it from a checkpoint plus the frames
after it. What it shows is built from its plain data: the snapshot by
app.frames.snapshot, table rows by app.frames.rows, the latency summary by
app.frames.latencies.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from app.frames import snapshot
from app.frames.block_table import BlockTable
from app.frames.checkpoint import Checkpoint
from app.frames.latencies import Latencies
from app.frames.row_index import RowIndex
from app.frames.rows import END_MARKS, close_open, new_row, table_rows
from app.frames.step_reasons import StepReasons
from protocol.codes import FrameType, Phase, RequestMark, RequestStatus, SegmentKind, SessionEvent
from protocol.envelope import encode
from protocol.views import (
    ConfigMark,
    LatencySummary,
    RequestRow,
    SnapshotData,
    SnapshotHead,
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

# Plain strings: the fold runs for every frame, and reading an enum member off its class
# costs ~200 ns in Python 3.11 (a global: ~35 ns).
ARRIVED, REJECTED_MARK, FIRST_TOKEN, SCHEDULED, FINISHED_MARK, ABORTED = (
    RequestMark.ARRIVED.value, RequestMark.REJECTED.value, RequestMark.FIRST_TOKEN.value,
    RequestMark.SCHEDULED.value, RequestMark.FINISHED.value, RequestMark.ABORTED.value,
)  # fmt: skip
RUNNING, PREEMPTED, FINISHED, REJECTED = (
    RequestStatus.RUNNING.value, RequestStatus.PREEMPTED.value, RequestStatus.FINISHED.value,
    RequestStatus.REJECTED.value,
)  # fmt: skip
DECODE = Phase.DECODE.value
SEG_PREEMPTED = SegmentKind.PREEMPTED.value

HISTORY_STEPS = 2000
PLAN_STEPS = 256
"""Only the latest steps keep their full plan ({req: n}) in the history (the step table)."""


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
        self.index = RowIndex()
        """Which rows are waiting never scheduled, started or done (app.frames.row_index)."""
        self.waiting_detail: WaitingDetail = {}
        """The numbers behind the latest step's waiting reasons (engine.waiting)."""
        self.in_flight: set[str] = set()
        """Async scheduling: requests with output placeholders after the latest step."""
        self.reasons = StepReasons()
        """The latest step's waiting reasons; a waiting row's is resolved when the rows
        are read (settle), not written every step (app.frames.step_reasons)."""

    # ------------------------------------------------------------------ fold
    def apply(self, frame_type: str, seq: int, data: Mapping[str, Any]) -> None:
        """Fold one frame (`data` as validated: protocol.wire's shape for its type); a
        frame type the fold has no use for only moves `seq`."""
        self.seq = seq
        fold = FOLDS.get(frame_type)
        if fold is not None:
            fold(self, data)

    def _apply_iteration(self, d: IterationData) -> None:
        """One step: the rows of the requests it scheduled, preempted, sampled and
        finished, the block map, the latency samples, and its summary in the history."""
        step = d["step"]
        self.step = step
        t_end = round(d["t_start"] + d["duration"], 6)  # µs: no float noise in checkpoints
        self.t = t_end
        totals = self.totals
        totals["steps"] += 1
        totals["scheduled_tokens"] += d["budget"]["used"]
        for req in d["arrived"]:
            self.row(req)
        self._apply_scheduled(d)
        for p in d["preempted"]:
            row = self.row(p["req"])
            row["status"] = PREEMPTED
            self.index.scheduled(p["req"])
            row["num_preemptions"] += 1
            row["num_computed_tokens"] = 0
            row["segments"].append([SEG_PREEMPTED, step, None, p["tokens_lost"]])
            totals["preemptions"] += 1
        appended = d.get("appended", {})
        sampled, requests = d["sampled"], self.requests
        for req in sampled:
            row = requests.get(req) or self.row(req)
            n = appended.get(req, 1) if appended else 1
            row["num_tokens"] += n
            totals["output_tokens"] += n
            row["last_token_t"] = t_end
        self.latencies.tokens(sampled, t_end)
        for f in d["finished"]:
            row = self.row(f["req"])
            self.reasons.freeze(row)
            row["status"], row["finish_reason"] = FINISHED, f["reason"]
            row["finish_step"] = step
            self.index.ended(f["req"])
            # The request's own `finished` mark follows with the same time; until it is
            # folded the row is finished already, so it has its finish time too.
            row["finish_t"] = t_end
        accepted = self._apply_waiting_and_spec(d)
        kv = d["kv"]
        self.blocks.apply(d["blocks"], kv["total"])
        self.kv_peak = max(self.kv_peak, kv["used"])
        self.simulated = d["simulated"]
        history = self.history
        if len(history) >= PLAN_STEPS:
            # Older steps keep their totals for the charts, not their per-request plan.
            old = history[-PLAN_STEPS]
            old.pop("plan", None)
            old.pop("finished", None)
            old.pop("preempted_ids", None)
        history.append(snapshot.step_summary(d, t_end, accepted))

    def _apply_scheduled(self, d: IterationData) -> None:
        step, totals, requests = d["step"], self.totals, self.requests
        for item in d["scheduled"]:
            row = requests.get(item["req"]) or self.row(item["req"])
            if row["status"] != RUNNING:
                close_open(row, step)
                row["status"] = RUNNING
                self.index.scheduled(item["req"])
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

    def _apply_waiting_and_spec(self, d: IterationData) -> int:
        """Waiting reasons, accepted drafts and output placeholders; the drafts accepted."""
        requests = self.requests
        self.reasons.apply(d, requests)
        self.waiting_detail = d.get("waiting_detail", {})
        accepted = d.get("accepted", {})
        for req, n in accepted.items():
            acc_row = requests.get(req)
            if acc_row is not None:
                acc_row["num_accepted_tokens"] = acc_row.get("num_accepted_tokens", 0) + n
        placeholders = d.get("placeholders", {})
        for req in self.in_flight - placeholders.keys():
            ph_row = requests.get(req)
            if ph_row is not None:
                ph_row["placeholders"] = 0
        for req, n in placeholders.items():
            self.row(req)["placeholders"] = n
        self.in_flight = set(placeholders)
        return sum(accepted.values())

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

    def settle(self, rows: Iterable[RequestRow] | None = None) -> None:
        """Write the waiting reasons as of the latest step into `rows` (default: all)."""
        self.reasons.settle(self.requests.values() if rows is None else rows)

    def row(self, req: str) -> RequestRow:
        """`req`'s row (a new one, waiting since the next step, if it has none yet)."""
        row = self.requests.get(req)
        if row is None:
            row = self.requests[req] = new_row(req, max(self.step + 1, 0), self.t)
            self.index.added(req)
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
            self.reasons.freeze(row)
            row["status"], reason = END_MARKS[kind]
            row["finish_reason"] = detail.get("reason", reason)
            row["finish_step"], row["segments"] = d["step"], []
            self.index.retire(req, self.requests)
        elif kind == FIRST_TOKEN:
            row = self.row(req)
            row["first_token_t"] = t
            self.latencies.ttft.append(round(t - row["arrived_t"], 6))
        elif kind == SCHEDULED:
            row = self.row(req)
            self.latencies.queue.append(round(t - row["arrived_t"], 6))
        elif kind in (FINISHED_MARK, ABORTED):
            row = self.row(req)
            self.reasons.freeze(row)
            row["status"], reason = END_MARKS[kind]
            row["finish_reason"] = detail.get("reason", reason)
            row["finish_step"] = d["step"]
            row["finish_t"] = t
            close_open(row, d["step"])
            self.latencies.last_token_t.pop(req, None)
            if kind == FINISHED_MARK:
                self.latencies.e2e.append(round(t - row["arrived_t"], 6))
            self.index.retire(req, self.requests)

    # ----------------------------------------------------------- checkpoints
    def to_checkpoint(self, requests: dict[str, RequestRow] | None = None) -> Checkpoint:
        """Everything needed to resume folding from here (JSON-serialisable). `requests`:
        the rows to store instead of all (settled by the caller)."""
        if requests is None:
            self.settle()
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
            "requests": self.requests if requests is None else requests,
            "blocks": self.blocks.tuples(),
            "history": list(self.history),
            "totals": self.totals,
            "kv_peak": self.kv_peak,
            "last_token_t": self.latencies.last_token_t,
            "done": list(self.index.done),
            "dropped_rows": self.index.dropped,
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
        state.index.done.extend(data.get("done", ()))
        state.index.dropped = int(data.get("dropped_rows", 0))
        state.waiting_detail = data.get("waiting_detail", {}).copy()
        state.in_flight = set(data.get("in_flight", ()))
        state.index.rebuild(state.requests.items())
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
        """The state for a late joiner (app.frames.snapshot.build: `compact`, `columns`)."""
        self.settle()
        out = snapshot.build(
            self.head(),
            list(self.requests.values()),
            list(self.history),
            totals=self.totals,
            dropped_rows=self.index.dropped,
            waiting_detail=self.waiting_detail,
            compact=compact,
            columns=columns,
        )
        if with_blocks:
            out["blocks"] = self.blocks.rows()
        return out

    def head(self) -> SnapshotHead:
        """The snapshot's scalars (copies)."""
        return {
            "session": self.session,
            "meta": dict(self.meta),
            "seq": self.seq,
            "step": self.step,
            "t": self.t,
            "config": dict(self.config),
            "config_version": self.config_version,
            "config_marks": list(self.config_marks),
            "paused": self.paused,
            "simulated": self.simulated,
        }

    @property
    def num_requests(self) -> int:
        """Every request the session has had (the rows dropped past MAX_DONE_ROWS too)."""
        return len(self.requests) + self.index.dropped

    def request_rows(self) -> list[TableRow]:
        """The request table's rows, in arrival order (app.frames.rows.table_rows)."""
        self.settle()
        return table_rows(self.requests.values(), self.waiting_detail)

    def latency_summary(self) -> LatencySummary:
        """Latency quantiles and totals (app.frames.latencies)."""
        return self.latencies.summary(self.t, self.totals, self.kv_peak)


FOLDS: dict[str, Callable[[SessionState, Any], None]] = {
    FrameType.ITERATION.value: SessionState._apply_iteration,
    FrameType.REQUEST.value: SessionState._apply_request,
    FrameType.CONFIG.value: SessionState._apply_config,
    FrameType.SESSION.value: SessionState._apply_session,
}
"""Each frame type the fold reads, and where it folds it (`data`: that type's shape)."""
