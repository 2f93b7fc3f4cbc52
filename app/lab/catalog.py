"""The figures a sweep point has (engine/run_metrics.py), named for people and charts:
latency families with p50/p95/p99, and single numbers. +1: higher is better, -1: lower."""

from __future__ import annotations

from typing_extensions import TypedDict

PERCENTILES = ("p50", "p95", "p99")

# (family, label): each has <family>_p50_ms, _p95_ms, _p99_ms.
LATENCIES = (
    ("ttft", "TTFT (time to first token)"),
    ("tpot", "TPOT (time per output token)"),
    ("itl", "ITL (inter-token latency)"),
    ("e2e", "E2E latency"),
    ("queue", "queue time"),
)

# (key, label, unit, direction)
SCALARS = (
    ("output_tokens_per_s", "output tokens/s", "tok/s", 1),
    ("input_tokens_per_s", "input tokens/s", "tok/s", 1),
    ("duration_s", "run time", "s", -1),
    ("steps", "steps", "", -1),
    ("mean_step_ms", "mean step time", "ms", 0),
    ("mean_scheduled_tokens", "mean scheduled tokens/step", "tokens", 0),
    ("mean_batch_size", "mean batch size", "seqs", 0),
    ("preemptions", "preemptions", "", -1),
    ("tokens_recomputed", "tokens recomputed", "tokens", -1),
    ("prefix_cache_hit_rate", "prefix-cache hit rate", "", 1),
    ("kv_peak_blocks", "KV peak", "blocks", 0),
    ("kv_peak_fraction", "KV peak (fraction of the pool)", "", 0),
    ("padding_tokens", "padding tokens", "tokens", -1),
    ("draft_tokens", "draft tokens", "tokens", 0),
    ("draft_acceptance", "draft acceptance", "", 1),
    ("requests_finished", "requests finished", "", 1),
    ("requests_rejected", "requests rejected", "", -1),
    ("requests_aborted", "requests aborted", "", -1),
)


class Metric(TypedDict):
    """A figure a chart can plot (`direction` +1: higher is better, -1: lower, 0: neither)."""

    key: str
    label: str
    unit: str
    percentiles: bool
    direction: int


def metric_catalog() -> list[Metric]:
    """What a chart can plot: families (with percentiles) first, then single numbers."""
    out: list[Metric] = [
        {"key": fam, "label": label, "unit": "ms", "percentiles": True, "direction": -1}
        for fam, label in LATENCIES
    ]
    out += [
        {"key": key, "label": label, "unit": unit, "percentiles": False, "direction": d}
        for key, label, unit, d in SCALARS
    ]
    return out


COUNTS = frozenset(
    ("steps", "preemptions", "tokens_recomputed", "kv_peak_blocks", "padding_tokens",
     "draft_tokens", "requests_finished", "requests_rejected", "requests_aborted")
)  # fmt: skip
"""The single numbers that count something: a run's are whole numbers, shown as such."""

SUMMARY = ("ttft_p50_ms", "ttft_p99_ms", "itl_p99_ms", "e2e_p50_ms", "output_tokens_per_s",
           "preemptions")  # fmt: skip
"""The columns the CLI prints per knob value."""
