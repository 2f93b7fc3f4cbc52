"""One engine's Prometheus series (one `engine` label value), folded from its frames the
way vLLM 0.20's stat loggers count (vllm/v1/metrics/stats.py, loggers.py).

Where the frames cannot say what vLLM counts, the choice is written down here and in
docs/operators.md (e.g. `iteration_tokens_total` observes the tokens scheduled in the
step; vLLM observes prompt tokens of prefills that completed plus generated tokens).
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.live import metric_defs as d
from app.live.kv_residency import BlockResidency
from protocol.codes import RequestMark


class Hist:
    """Cumulative-ready bucket counts, a sum and a count."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] | list[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def observe_all(self, values: list[float]) -> None:
        """`observe` each of `values`, in order (the same sum, bit for bit); a value seen
        before in them finds its bucket without a search (a step's ITLs share a few)."""
        bounds, counts = self.bounds, self.counts
        bucket: dict[float, int] = {}
        total = self.sum
        for value in values:
            at = bucket.get(value)
            if at is None:
                at = bucket[value] = bisect.bisect_left(bounds, value)
            counts[at] += 1
            total += value
        self.sum = total
        self.count += len(values)

    def cumulative(self) -> list[tuple[str, int]]:
        """[(le, count <= le)], ending with +Inf, as prometheus_client wants them."""
        out, running = [], 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            running += n
            out.append((repr(bound), running))
        out.append(("+Inf", self.count))
        return out


@dataclass(slots=True)
class _Req:
    """What a request's end-of-life histograms need (vLLM's FinishedRequestStats)."""

    arrived: float
    num_prompt: int = 0
    max_tokens: int = 0
    scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    num_cached: int = 0
    num_generated: int = 0


class EngineStats:
    def __init__(self, model_name: str, engine: str, config: Mapping[str, Any]) -> None:
        self.labels = (model_name, engine)
        self.config = dict(config)
        max_len = int(config.get("max_model_len") or 0) or 1 << 20
        self.hist = {
            name: Hist(d.build_1_2_5_buckets(max_len) if bounds == d.LEN else bounds)  # type: ignore[arg-type]
            for name, (_, bounds) in d.HISTOGRAMS.items()
        }
        self.counters: Counter[str] = Counter(dict.fromkeys(d.COUNTERS, 0))
        num_spec = int(config.get("num_speculative_tokens") or 0)
        self.request_success: Counter[Any] = Counter(dict.fromkeys(d.FINISH_REASONS, 0))
        self.prompt_by_source: Counter[Any] = Counter(dict.fromkeys(d.PROMPT_SOURCES, 0))
        self.cached_by_source: Counter[Any] = Counter({d.CACHED_SOURCE: 0})
        self.accepted_per_pos: Counter[Any] = Counter(dict.fromkeys(range(num_spec), 0))
        self.labelled = {
            "vllm:request_success": self.request_success,
            "vllm:prompt_tokens_by_source": self.prompt_by_source,
            "vllm:prompt_tokens_cached_by_source": self.cached_by_source,
            "vllm:spec_decode_num_accepted_tokens_per_pos": self.accepted_per_pos,
        }
        """Counters with one more label (metric_defs.LABELLED_COUNTERS): value -> count."""
        self.running = self.waiting = 0
        self.kv_usage = 0.0
        self.waiting_reasons: Counter[str] = Counter()
        self.live = True
        self.session = ""
        """The engine's current (or last) session."""
        self._reqs: dict[str, _Req] = {}
        self._blocks = BlockResidency()

    def begin_session(self, session: str, config: Mapping[str, Any]) -> None:
        """The engine started `session`: counters and histograms go on (one series per
        engine, whatever its sessions); what belonged to the last session is dropped (its
        requests, its block residency, its queues) and the knobs are the new session's.
        Bucket bounds stay as the series began (a series never changes its buckets)."""
        self.session = session
        self.config = dict(config)
        num_spec = int(config.get("num_speculative_tokens") or 0)
        for pos in range(num_spec):
            self.accepted_per_pos.setdefault(pos, 0)
        self.running = self.waiting = 0
        self.kv_usage = 0.0
        self.waiting_reasons = Counter()
        self._reqs = {}
        self._blocks = BlockResidency()

    # ------------------------------------------------------------ iteration
    def on_iteration(self, data: Mapping[str, Any]) -> None:
        t_end = data["t_start"] + data["duration"]
        queues, kv = data["queues"], data["kv"]
        self.running, self.waiting = queues["running_end"], queues["waiting_end"]
        self.kv_usage = kv["used_end"] / kv["total"] if kv["total"] else 0.0
        named = data["waiting_reasons"]
        reasons = Counter(named.values())
        default = data.get("waiting_default")
        unnamed = queues["waiting"] - len(named)
        if default is not None and unnamed > 0:  # the others waiting (compact reasons)
            reasons[default] += unnamed
        other = self.waiting - sum(reasons.values())
        if other > 0:
            reasons["other"] += other
        self.waiting_reasons = reasons
        c = self.counters
        c["vllm:num_preemptions"] += len(data["preempted"])
        # With speculative decoding a request appends 1 + accepted drafts in one step.
        appended = data.get("appended") or {}
        sampled = data["sampled"]
        c["vllm:generation_tokens"] += (
            sum(appended.get(r, 1) for r in sampled) if appended else len(sampled)
        )
        self.hist["vllm:iteration_tokens_total"].observe(data["budget"]["used"])
        self._spec_decode(data)
        caching = bool(self.config.get("enable_prefix_caching", True))
        block_size = int(self.config.get("block_size") or 16)
        new = set(data["new"])
        hits: dict[str, int] = {}
        # The producer's own count (our engine: as its vLLM release counts); else one
        # lookup per admitted request, from the scheduled rows.
        counted = "prefix_queries" in kv
        if counted:
            c["vllm:prefix_cache_queries"] += kv["prefix_queries"]
            c["vllm:prefix_cache_hits"] += kv["prefix_hits"]
        for item in data["scheduled"] if new else ():
            req = item["req"]
            if req not in new:
                continue
            rec = self._reqs.get(req)
            hit = item["prefix_hit"]
            hits[req] = hit // block_size
            if rec is not None and rec.scheduled is None:
                rec.num_cached = hit
            if caching and not counted:  # vLLM records no lookup with prefix caching off
                c["vllm:prefix_cache_queries"] += rec.num_prompt if rec else item["n"] + hit
                c["vllm:prefix_cache_hits"] += hit
        gaps: list[float] = []
        reqs = self._reqs
        for req in sampled:
            rec = reqs.get(req)
            if rec is None:
                continue
            if rec.last_token is not None:
                gaps.append(t_end - rec.last_token)
            rec.last_token = t_end
            rec.num_generated += appended.get(req, 1) if appended else 1
        self.hist["vllm:inter_token_latency_seconds"].observe_all(gaps)
        evicted = self._blocks.step(t_end, data["blocks"], hits)
        if evicted:
            self.hist["vllm:kv_block_lifetime_seconds"].observe_all(evicted.lifetimes_s)
            self.hist["vllm:kv_block_idle_before_evict_seconds"].observe_all(evicted.idles_s)
            self.hist["vllm:kv_block_reuse_gap_seconds"].observe_all(evicted.reuse_gaps_s)

    def _spec_decode(self, data: Mapping[str, Any]) -> None:
        """vLLM's SpecDecodingStats: per request whose drafts were verified this step, one
        draft, its draft tokens, the accepted ones and the positions accepted."""
        # Drafts ride in the scheduled rows (`spec`) of the step that verifies them (n-gram
        # drafting runs the sync loop: the batch applied is this step's); `accepted` lists
        # the requests whose drafts the output verified.
        accepted = data.get("accepted") or {}
        if not accepted:
            return
        drafts = {i["req"]: i.get("spec", 0) for i in data["scheduled"] if i.get("spec")}
        c = self.counters
        for req, num_accepted_raw in accepted.items():
            num_draft = drafts.get(req, 0)
            if num_draft <= 0:
                continue
            num_accepted = min(int(num_accepted_raw), num_draft)
            c["vllm:spec_decode_num_drafts"] += 1
            c["vllm:spec_decode_num_draft_tokens"] += num_draft
            c["vllm:spec_decode_num_accepted_tokens"] += num_accepted
            for pos in range(num_accepted):
                self.accepted_per_pos[pos] += 1

    # ------------------------------------------------------------- requests
    def on_request(self, data: Mapping[str, Any]) -> None:
        kind, req, t = data["kind"], data["req"], data["t"]
        detail = data.get("detail") or {}
        if kind == RequestMark.ARRIVED:
            self._reqs[req] = _Req(
                t, int(detail.get("num_prompt_tokens", 0)), int(detail.get("max_tokens", 0))
            )
            return
        rec = self._reqs.get(req)
        if rec is None:
            return
        if kind == RequestMark.SCHEDULED and rec.scheduled is None:
            rec.scheduled = t
        elif kind == RequestMark.FIRST_TOKEN and rec.first_token is None:
            rec.first_token = t
            self.hist["vllm:time_to_first_token_seconds"].observe(t - rec.arrived)
            self._count_prompt(rec)
        elif kind in (RequestMark.FINISHED, RequestMark.ABORTED, RequestMark.REJECTED):
            del self._reqs[req]
            if kind == RequestMark.REJECTED:
                return
            reason = "abort" if kind == RequestMark.ABORTED else str(detail.get("reason") or "stop")
            self.request_success[reason if reason in d.FINISH_REASONS else "stop"] += 1
            self._finished(rec, t, detail)

    def _count_prompt(self, rec: _Req) -> None:
        cached = min(rec.num_cached, rec.num_prompt)
        c = self.counters
        c["vllm:prompt_tokens"] += rec.num_prompt
        c["vllm:prompt_tokens_cached"] += cached
        self.cached_by_source[d.CACHED_SOURCE] += cached
        self.prompt_by_source["local_cache_hit"] += cached
        self.prompt_by_source["local_compute"] += rec.num_prompt - cached

    def _finished(self, rec: _Req, t: float, detail: Mapping[str, Any]) -> None:
        """vLLM's FinishedRequestStats, observed when a request finishes or is aborted."""
        h = self.hist
        generated = int(detail.get("num_output_tokens", rec.num_generated))
        scheduled = rec.scheduled if rec.scheduled is not None else t
        first = rec.first_token if rec.first_token is not None else t
        last = rec.last_token if rec.last_token is not None else first
        decode = max(last - first, 0.0)
        h["vllm:e2e_request_latency_seconds"].observe(t - rec.arrived)
        h["vllm:request_queue_time_seconds"].observe(scheduled - rec.arrived)
        h["vllm:request_prefill_time_seconds"].observe(max(first - scheduled, 0.0))
        h["vllm:request_decode_time_seconds"].observe(decode)
        h["vllm:request_inference_time_seconds"].observe(max(last - scheduled, 0.0))
        h["vllm:request_time_per_output_token_seconds"].observe(
            decode / (generated - 1) if generated > 1 else 0.0
        )
        h["vllm:request_prompt_tokens"].observe(rec.num_prompt)
        h["vllm:request_generation_tokens"].observe(generated)
        h["vllm:request_max_num_generation_tokens"].observe(generated)
        h["vllm:request_params_n"].observe(1)
        if rec.max_tokens:
            h["vllm:request_params_max_tokens"].observe(rec.max_tokens)
        cached = int(detail.get("num_cached_tokens", rec.num_cached))
        h["vllm:request_prefill_kv_computed_tokens"].observe(rec.num_prompt - max(cached, 0))

    def cache_info(self) -> dict[str, str]:
        """`vllm:cache_config_info`'s labels (vLLM's CacheConfig.metrics_info(), the
        fields we know; vLLM writes an unset one as 'None')."""
        cfg = self.config
        return {
            "block_size": str(cfg.get("block_size")),
            "num_gpu_blocks": str(cfg.get("num_gpu_blocks")),
            "enable_prefix_caching": str(cfg.get("enable_prefix_caching")),
            "cache_dtype": str(cfg.get("cache_dtype", "auto")),
            "num_cpu_blocks": str(cfg.get("num_cpu_blocks")),
        }
