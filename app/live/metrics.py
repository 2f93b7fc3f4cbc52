"""Prometheus metrics in vLLM 0.20's names, fed by the hub, so vLLM's Grafana dashboards
work against a batchscope dashboard (docs/operators.md).

Every engine is its own series: label `engine` is the node's name for an ingested node
and `local` for the dashboard's own engine, so an engine's counters go on across its
sessions (a scenario, a restart, a reconnect) instead of each session starting a new
series; `model_name` is the served model's name; `batchscope:engine_session_info` says
which session each engine runs. Re-runs (what-if replays of a
recording) and sessions relayed from another dashboard process are not counted: they
are not traffic this process served. The exposition is prometheus_client's, over the
families `collect()` builds at scrape time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from app.live import metric_defs as d
from app.live.engine_stats import EngineStats
from app.live.hub import EventHub
from protocol.codes import FrameType, SessionEvent
from protocol.wire import SessionMeta

log = logging.getLogger("batchscope.metrics")

KEEP_ENDED = 8
"""Ended local engine series (another model name) that stay exported (then dropped)."""


class Metrics(Collector):
    """A hub listener that folds frames into one EngineStats per engine."""

    def __init__(self, hub: EventHub) -> None:
        self.hub = hub
        self.engines: dict[tuple[str, str], EngineStats] = {}
        self._by_session: dict[str, EngineStats | None] = {}
        """Each session's series (None: not counted); a series outlives its sessions."""
        self._local: list[tuple[str, str]] = []
        """Series of local sessions, oldest first."""
        self.errors = 0
        """Frames that could not be counted (logged)."""
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        hub.add_listener(self.on_frame)

    # ---------------------------------------------------------------- folding
    def on_frame(
        self, session: str, frame_type: str, seq: int, data: Mapping[str, Any], text: str
    ) -> None:
        del text
        try:
            self._fold(session, frame_type, data)
        except Exception:  # a metrics bug must never cost the hub (or the recorder) a frame
            self.errors += 1
            log.exception("metrics: frame %s of %s not counted", seq, session)

    def _fold(self, session: str, frame_type: str, data: Mapping[str, Any]) -> None:
        stats = self._stats(session)
        if stats is None:
            return
        fold = FOLDS.get(frame_type)
        if fold is not None:
            fold(self, stats, session, data)

    def _on_iteration(self, stats: EngineStats, session: str, data: Mapping[str, Any]) -> None:
        del session
        stats.on_iteration(data)

    def _on_request(self, stats: EngineStats, session: str, data: Mapping[str, Any]) -> None:
        del session
        stats.on_request(data)

    def _on_config(self, stats: EngineStats, session: str, data: Mapping[str, Any]) -> None:
        del session
        stats.config.update(data.get("config") or {})

    def _on_session(self, stats: EngineStats, session: str, data: Mapping[str, Any]) -> None:
        event = data.get("event")
        if event == SessionEvent.CLOSED:
            if stats.session == session:  # not a late mark of the engine's last session
                stats.live = False
                self._forget_ended()
        elif event == SessionEvent.OPENED:
            stats.live = True

    def _stats(self, session: str) -> EngineStats | None:
        if session in self._by_session:
            return self._by_session[session]
        info = self.hub.sessions.get(session)
        meta = info.meta if info is not None else {}
        source = str(meta.get("source") or "")
        relayed = self.hub.is_relayed(session) or bool(meta.get("relayed"))
        counted = info is not None and not relayed
        counted = counted and (source == "local" or source.startswith("node:"))
        stats = None
        if counted:
            engine = d.LOCAL_ENGINE if source == "local" else str(meta.get("node") or session)
            key = (model_name(meta), engine)
            config = meta.get("config") or {}
            stats = self.engines.get(key)
            if stats is None:
                stats = self.engines[key] = EngineStats(*key, config)
                if source == "local":
                    self._local.append(key)
            stats.begin_session(session, config)
            stats.live = True
        self._by_session[session] = stats
        return stats

    def _forget_ended(self) -> None:
        """Keep the series of live engines, of nodes, and of the latest ended local
        sessions (each local session is its own series: without this they would pile up)."""
        ended = [k for k in self._local if not self.engines[k].live]
        for key in ended[:-KEEP_ENDED]:
            self._local.remove(key)
            del self.engines[key]

    # ------------------------------------------------------------- exposition
    def collect(self) -> Iterator[Metric]:
        engines = list(self.engines.values())
        live = [s for s in engines if s.live]
        labels = list(d.LABELS)
        for name, doc in d.GAUGES.items():
            family = GaugeMetricFamily(name, doc, labels=labels)
            for s in live:
                value = {
                    "vllm:num_requests_running": s.running,
                    "vllm:num_requests_waiting": s.waiting,
                    "vllm:kv_cache_usage_perc": s.kv_usage,
                }[name]
                family.add_metric(s.labels, value)
            yield family
        yield from _waiting_by_reason(live)
        sleep = GaugeMetricFamily(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine "
            "is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means "
            "sleep level 2.",
            labels=[*labels, "sleep_state"],
        )
        for s in live:
            for state in d.SLEEP_STATES:
                sleep.add_metric([*s.labels, state], 1 if state == "awake" else 0)
        yield sleep
        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=["engine", *d.CACHE_INFO_LABELS],
        )
        for s in engines:
            cache = s.cache_info()
            info.add_metric([s.labels[1], *(cache[k] for k in d.CACHE_INFO_LABELS)], 1)
        yield info
        sessions = GaugeMetricFamily(
            "batchscope:engine_session_info",
            "The session each engine runs (or ran last): 1 for its current one.",
            labels=[*labels, "session"],
        )
        for s in engines:
            sessions.add_metric([*s.labels, s.session], 1)
        yield sessions
        yield from _counters(engines)
        for name, (doc, _) in d.HISTOGRAMS.items():
            hist = HistogramMetricFamily(name, doc, labels=labels)
            for s in engines:
                h = s.hist[name]
                hist.add_metric(s.labels, h.cumulative(), h.sum)
            yield hist

    def exposition(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


def model_name(meta: SessionMeta) -> str:
    """vLLM's `model_name` label: the served model's name."""
    for key in ("served_model_name", "model"):
        if meta.get(key):
            return str(meta[key])
    runner = meta.get("runner") or "engine"
    return f"batchscope-{runner}"


def _waiting_by_reason(live: list[EngineStats]) -> Iterator[Metric]:
    labels = [*d.LABELS, "reason"]
    vllm = GaugeMetricFamily(
        "vllm:num_requests_waiting_by_reason",
        "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
        "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, "
        "KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
        labels=labels,
    )
    ours = GaugeMetricFamily(
        "batchscope:num_requests_waiting_by_reason",
        "Waiting requests by the scheduler's own reason at the last step (token_budget, "
        "max_num_seqs, kv_blocks, policy_order, ...; 'other': not classified this step). "
        "vllm:num_requests_waiting_by_reason folds them into capacity and deferred.",
        labels=labels,
    )
    for s in live:
        deferred = sum(n for r, n in s.waiting_reasons.items() if r in d.DEFERRED_REASONS)
        deferred = min(deferred, s.waiting)
        vllm.add_metric([*s.labels, "capacity"], s.waiting - deferred)
        vllm.add_metric([*s.labels, "deferred"], deferred)
        for reason, n in sorted(s.waiting_reasons.items()):
            ours.add_metric([*s.labels, reason], n)
    yield vllm
    yield ours


def _counters(engines: list[EngineStats]) -> Iterator[Metric]:
    labels = list(d.LABELS)
    for name, doc in d.COUNTERS.items():
        family = CounterMetricFamily(name, doc, labels=labels)
        for s in engines:
            family.add_metric(s.labels, s.counters[name])
        yield family
    for name, (doc, label) in d.LABELLED_COUNTERS.items():
        family = CounterMetricFamily(name, doc, labels=[*labels, label])
        for s in engines:
            for value, n in sorted(s.labelled[name].items()):
                family.add_metric([*s.labels, str(value)], n)
        yield family


Fold = Callable[[Metrics, EngineStats, str, Mapping[str, Any]], None]

FOLDS: dict[str, Fold] = {
    FrameType.ITERATION.value: Metrics._on_iteration,
    FrameType.REQUEST.value: Metrics._on_request,
    FrameType.CONFIG.value: Metrics._on_config,
    FrameType.SESSION.value: Metrics._on_session,
}
"""What each frame type adds to its engine's series (others add nothing)."""
