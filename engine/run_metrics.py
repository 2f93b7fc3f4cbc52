"""The figures of one run, from a `simulate` result: latency percentiles (TTFT, TPOT, ITL,
E2E, queue time), throughput, step shape, preemption, prefix cache, KV and drafts.

Time is the runner's: each step lasts its `forward_ms` (modelled on the SimRunner,
measured on the torch runner), so a request that arrives at step s arrives when step s
starts, and its first token is there when the step that sampled it ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PERCENTILES = (50, 95, 99)
LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms")


def percentile(sorted_values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        return 0.0
    k = (len(sorted_values) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def run_metrics(result: dict[str, Any], usable_blocks: int | None = None) -> dict[str, float]:
    """Flat {metric: value}; latencies as `<name>_p50/_p95/_p99` in milliseconds."""
    steps = result["steps"]
    end: dict[int, float] = {}
    t = 0.0
    begin: dict[int, float] = {}
    for s in steps:
        t += s.get("idle_ms", 0.0)
        begin[s["step"]] = t
        t += s.get("forward_ms", 0.0)
        end[s["step"]] = t
    total_ms = t

    def start_of(step: int) -> float:
        return begin.get(step, end.get(step - 1, 0.0))

    samples: dict[str, list[float]] = {name: [] for name in LATENCIES}
    last_token_at: dict[str, float] = {}
    for s in steps:
        for req_id, n in s.get("appended_tokens", {}).items():
            now = end[s["step"]]
            prev = last_token_at.get(req_id)
            if prev is not None and n:
                samples["itl_ms"].append((now - prev) / n)
            last_token_at[req_id] = now
    prompt_tokens = output_tokens = 0
    ended = {"rejected": 0, "abort": 0}
    for rec in result["requests"].values():
        reason = rec.get("finish_reason")
        if reason in ended:
            ended[reason] += 1
        if reason in (None, "rejected"):
            continue
        arrival = rec.get("arrival_ms")
        if arrival is None:
            arrival = start_of(rec["arrival_step"])
        if rec.get("first_scheduled_step") is not None:
            samples["queue_ms"].append(start_of(rec["first_scheduled_step"]) - arrival)
        if rec.get("first_token_step") is not None:
            ttft = end[rec["first_token_step"]] - arrival
            samples["ttft_ms"].append(ttft)
            e2e = end[rec["finish_step"]] - arrival
            samples["e2e_ms"].append(e2e)
            if rec["num_output_tokens"] > 1:
                samples["tpot_ms"].append((e2e - ttft) / (rec["num_output_tokens"] - 1))
        prompt_tokens += rec["num_prompt_tokens"]
        output_tokens += rec["num_output_tokens"]

    n_steps = len(steps)
    hits = sum(sum(s["prefix_cache_hit_tokens"].values()) for s in steps)
    queries = sum(
        rec["num_prompt_tokens"]
        for rec in result["requests"].values()
        if rec.get("first_scheduled_step") is not None
    )
    kv_peak = max((s["kv_blocks_used"] for s in steps), default=0)
    totals = RunTotals(
        completed=int(result["completed"]),
        rejected=ended["rejected"],
        aborted=ended["abort"],
        steps=n_steps,
        total_ms=total_ms,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        scheduled_tokens=int(result["total_scheduled_tokens"]),
        batch_members=sum(len(s["scheduled"]) for s in steps),
        preemptions=int(result["total_preemptions"]),
        tokens_recomputed=int(result.get("tokens_recomputed", 0)),
        prefix_hits=hits,
        prefix_queries=queries,
        kv_peak=kv_peak,
        padding_tokens=int(result.get("total_padding_tokens", 0)),
        draft_tokens=int(result.get("total_draft_tokens", 0)),
        accepted_tokens=int(result.get("total_accepted_tokens", 0)),
    )
    return figures(samples, totals, usable_blocks)


@dataclass(slots=True)
class RunTotals:
    """A run's counts, summed over its steps and requests (plain numbers)."""

    completed: int = 0
    rejected: int = 0
    aborted: int = 0
    steps: int = 0
    total_ms: float = 0.0
    prompt_tokens: int = 0
    output_tokens: int = 0
    scheduled_tokens: int = 0
    batch_members: int = 0
    preemptions: int = 0
    tokens_recomputed: int = 0
    prefix_hits: int = 0
    prefix_queries: int = 0
    kv_peak: int = 0
    padding_tokens: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0


def figures(
    samples: dict[str, list[float]], totals: RunTotals, usable_blocks: int | None
) -> dict[str, float]:
    """The flat figures from latency samples (any order) and a run's totals."""
    out: dict[str, float] = {}
    for name, values in samples.items():
        values.sort()
        base = name.removesuffix("_ms")
        for p in PERCENTILES:
            out[f"{base}_p{p}_ms"] = round(percentile(values, p), 4)
    n_steps = totals.steps or 1
    seconds = totals.total_ms / 1000.0
    kv_peak = totals.kv_peak
    drafts = totals.draft_tokens
    queries = totals.prefix_queries
    out.update(
        {
            "requests_finished": float(totals.completed),
            "requests_rejected": float(totals.rejected),
            "requests_aborted": float(totals.aborted),
            "steps": float(totals.steps),
            "duration_s": round(seconds, 6),
            "input_tokens_per_s": round(totals.prompt_tokens / seconds, 3) if seconds else 0.0,
            "output_tokens_per_s": round(totals.output_tokens / seconds, 3) if seconds else 0.0,
            "mean_step_ms": round(totals.total_ms / n_steps, 4),
            "mean_scheduled_tokens": round(totals.scheduled_tokens / n_steps, 3),
            "mean_batch_size": round(totals.batch_members / n_steps, 3),
            "preemptions": float(totals.preemptions),
            "tokens_recomputed": float(totals.tokens_recomputed),
            "prefix_cache_hit_rate": round(totals.prefix_hits / queries, 4) if queries else 0.0,
            "kv_peak_blocks": float(kv_peak),
            "kv_peak_fraction": round(kv_peak / usable_blocks, 4) if usable_blocks else 0.0,
            "padding_tokens": float(totals.padding_tokens),
            "draft_tokens": float(drafts),
            "draft_acceptance": round(totals.accepted_tokens / drafts, 4) if drafts else 0.0,
        }
    )
    return out
