"""vLLM releases the engine can decide as: every behaviour change in one table.

A session chooses a release (`EngineConfig.vllm_version`). `release_features(version)`
turns the table into booleans once, when the scheduler takes its config; the hot paths
read those booleans and never compare version strings. `since` is the first vLLM release
whose source has the change (found by reading each release's scheduler, KV cache manager,
block pool, request and EngineCore, 0.20.0 .. 0.34.0). Every minor release from 0.20 to
0.34 is selectable (`SUPPORTED`) and decides with the changes whose `since` it has reached;
only the releases in `CHECKED` are checked step for step against vLLM
(tools/compare_scenario.py). A patch release runs as its minor release (0.27.1 -> 0.27).
docs/vllm_releases.md shows the same table.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cache

OLDEST, NEWEST = 20, 34
"""The minor releases of vLLM 0.x the table covers, both included."""
SUPPORTED: tuple[str, ...] = tuple(f"0.{minor}" for minor in range(OLDEST, NEWEST + 1))
"""Releases a session can decide as: every minor release the table covers."""
CHECKED: tuple[str, ...] = ("0.20", "0.33", "0.34")
"""Releases checked step for step against vLLM itself (tools/compare_scenario.py, in CI)."""
DEFAULT_VLLM_VERSION = SUPPORTED[-1]
"""The newest supported release: what a session runs unless it says otherwise."""

SCHED = "vllm/v1/core/sched/scheduler.py"
CONFIG = "vllm/config/scheduler.py"


@dataclass(frozen=True, slots=True)
class Change:
    flag: str
    """The `ReleaseFeatures` field it sets (knobs: the knob's name)."""
    since: str
    kind: str
    """decision | stats | knob | validation | loop"""
    summary: str
    source: str
    """Where it lives in vLLM (file: function)."""


CHANGES: tuple[Change, ...] = (
    Change(
        "lone_request_uncapped",
        "0.31",
        "decision",
        "long_prefill_token_threshold does not cap a request that is alone (running + "
        "waiting <= 1 when the step starts), drafts included",
        f"{SCHED}: Scheduler.schedule (threshold set before the running loop)",
    ),
    Change(
        "threshold_needs_chunked_prefill",
        "0.34",
        "decision",
        "long_prefill_token_threshold caps nothing when chunked prefill is off (before, it "
        "cut a prompt to the threshold even then, and the cut prompt ran in pieces)",
        f"{SCHED}: Scheduler.schedule (threshold set before the running loop)",
    ),
    Change(
        "priority_self_preemption_continues",
        "0.33",
        "decision",
        "priority policy: a running request that preempts itself no longer ends the "
        "running loop; the scan goes on with the next running request",
        f"{SCHED}: Scheduler.schedule (after the allocate_slots / preempt loop)",
    ),
    Change(
        "preemption_rewinds_by_position",
        "0.28",
        "decision",
        "priority policy: preempting a request that stands before the current one moves "
        "the scan back even if the victim was not scheduled this step (before: only a "
        "scheduled victim did, and the scan skipped a request)",
        f"{SCHED}: Scheduler.schedule (victim_index < req_index)",
    ),
    Change(
        "unhashed_blocks_reused_first",
        "0.24",
        "decision",
        "freed blocks without a prefix hash (or all, with prefix caching off) go to the "
        "head of the free queue and are reused first; hashed blocks still go to the tail",
        "vllm/v1/core/block_pool.py: BlockPool.free_blocks",
    ),
    Change(
        "sync_spec_caches_after_output",
        "0.33",
        "decision",
        "with speculative decoding the sync scheduler caches a request's full blocks after "
        "each output (accepted drafts included), not only when it allocates slots",
        f"{SCHED}: Scheduler.update_from_output",
    ),
    Change(
        "spec_pads_new_decodes",
        "0.25",
        "decision",
        "speculative decoding: a waiting request admitted with one token to compute (a "
        "prefix hit, or a one-token prompt behind scheduled running requests), when no "
        "running prefill chunk was scheduled, is padded to 1 + K tokens with K placeholder "
        "drafts (always rejected); if the padded size does not fit the budget it is not "
        "admitted this step (0.25 .. 0.29 pad only behind scheduled running requests: "
        "spec_pads_resumed_decodes)",
        f"{SCHED}: Scheduler.schedule (pad_spec_decode)",
    ),
    Change(
        "spec_pads_resumed_decodes",
        "0.30",
        "decision",
        "speculative decoding, the padding's 0.30 form: a new decode is padded also when no "
        "running request was scheduled if it has computed tokens (a prefix hit or a "
        "resume), and only with room for the sampled token under max_model_len (else it "
        "runs unpadded); before (0.25 .. 0.29), only behind scheduled running requests, and "
        "one whose padded size would pass max_model_len waited",
        f"{SCHED}: Scheduler.schedule (pad_spec_decode)",
    ),
    Change(
        "stop_rolls_back_computed",
        "0.33",
        "decision",
        "tokens trimmed after a stop (accepted drafts past it) are taken back from "
        "num_computed_tokens before the blocks are cached",
        f"{SCHED}: Scheduler._update_request_with_output",
    ),
    Change(
        "stale_output_after_preemption",
        "0.27",
        "decision",
        "async: preemption clears the output placeholders at once; the batch in flight "
        "still delivers its tokens as stale output (no counter changes) and a request with "
        "stale output is not readmitted until it drains (with the batch queue of 2 it has "
        "always drained by the next admission scan)",
        f"{SCHED}: Scheduler._preempt_request, update_from_output",
    ),
    Change(
        "in_flight_caching",
        "0.26",
        "decision",
        "async: blocks are cached up to num_computed_tokens - num_in_flight_tokens (all "
        "tokens of batches in flight) instead of - num_output_placeholders; the same "
        "blocks in batchscope's loops",
        f"{SCHED}: Scheduler.update_from_output",
    ),
    Change(
        "batch_queue_waits_while_requests",
        "0.23",
        "loop",
        "async: an empty batch no longer forces the oldest output to be applied while the "
        "scheduler still has requests and the queue has room",
        "vllm/v1/engine/core.py: EngineCore.step_with_batch_queue",
    ),
    Change(
        "prefix_stats_at_admission",
        "0.27",
        "stats",
        "prefix-cache queries and hits are counted when a request is admitted, not at "
        "every lookup (vllm:prefix_cache_queries drops under KV pressure)",
        f"{SCHED}: Scheduler.schedule (record_prefix_cache_stats)",
    ),
    Change(
        "threshold_within_max_model_len",
        "0.27",
        "validation",
        "long_prefill_token_threshold > max_model_len is refused in every configuration "
        "(before: only with max_num_partial_prefills > 1)",
        f"{CONFIG}: SchedulerConfig.verify_max_model_len",
    ),
    Change(
        "watermark",
        "0.24",
        "knob",
        "keep int(watermark * num_gpu_blocks) blocks free when admitting a waiting or "
        "preempted request while any request is running",
        "vllm/v1/core/kv_cache_manager.py: KVCacheManager.allocate_slots",
    ),
    Change(
        "throttle_prefills",
        "0.24",
        "knob",
        "schedule(throttle_prefills): a data-parallel engine defers prefill compute on "
        "off-cadence steps while decodes run",
        f"{SCHED}: Scheduler.schedule (defer_prefills)",
    ),
    Change(
        "prefill_schedule_interval",
        "0.33",
        "knob",
        "prefill (admissions and running chunks) only once every N executed steps while "
        "a decode runs, unless the last release step left requests waiting (the knob "
        "exists since 0.24 for data-parallel engines; 0.33 applies it to one engine)",
        f"{SCHED}: Scheduler.schedule (local_prefill_interval)",
    ),
    Change(
        "max_num_active_seqs",
        "0.31",
        "knob",
        "admission cap into RUNNING below max_num_seqs (which keeps sizing the runner)",
        f"{SCHED}: Scheduler.schedule (max_num_active_reqs)",
    ),
    Change(
        "long_prefill_token_threshold_adaptive",
        "0.31",
        "knob",
        "floor the threshold at max_num_batched_tokens // (running + waiting)",
        f"{SCHED}: Scheduler.schedule",
    ),
    Change(
        "cache_aware_admission_window",
        "0.34",
        "knob",
        "cache-aware admission: within the first N waiting requests (FCFS, prefix caching "
        "on), fresh requests are reordered deepest cached prefix first once KV usage "
        "reaches cache_aware_admission_threshold",
        f"{SCHED}: Scheduler._reorder_waiting_by_cached_prefix",
    ),
    Change(
        "cache_aware_admission_threshold",
        "0.34",
        "knob",
        "KV usage (default 0.5) from which the cache-aware window applies",
        CONFIG,
    ),
    Change(
        "partial_prefill_knobs_removed",
        "0.27",
        "knob",
        "max_num_partial_prefills and max_long_partial_prefills are gone; the v1 scheduler "
        "never read them (batchscope has never had them)",
        CONFIG,
    ),
)

KNOB_SINCE: dict[str, str] = {c.flag: c.since for c in CHANGES if c.kind == "knob"}


@dataclass(frozen=True, slots=True)
class ReleaseFeatures:
    """The table evaluated for one release: True where the release has the change."""

    version: str
    lone_request_uncapped: bool
    threshold_needs_chunked_prefill: bool
    priority_self_preemption_continues: bool
    preemption_rewinds_by_position: bool
    unhashed_blocks_reused_first: bool
    sync_spec_caches_after_output: bool
    spec_pads_new_decodes: bool
    spec_pads_resumed_decodes: bool
    stop_rolls_back_computed: bool
    stale_output_after_preemption: bool
    in_flight_caching: bool
    batch_queue_waits_while_requests: bool
    prefix_stats_at_admission: bool
    threshold_within_max_model_len: bool
    watermark: bool
    throttle_prefills: bool
    prefill_schedule_interval: bool
    max_num_active_seqs: bool
    long_prefill_token_threshold_adaptive: bool
    partial_prefill_knobs_removed: bool
    cache_aware_admission_window: bool
    cache_aware_admission_threshold: bool


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def normalize_version(value: object) -> str:
    """'0.33', '0.33.0', 'v0.33.0' or 0.33 -> '0.33'; ValueError for anything not a
    supported release (the message lists them)."""
    text = str(value).strip().lstrip("v")
    parts = text.split(".")
    if len(parts) >= 2 and all(p.isdigit() for p in parts[:2]):
        text = f"{int(parts[0])}.{int(parts[1])}"
    if text not in SUPPORTED:
        raise ValueError(
            f"vLLM release {value!r} is not supported; choose a release from {SUPPORTED[0]} "
            f"to {SUPPORTED[-1]} ({', '.join(SUPPORTED)})"
        )
    return text


def nearest_supported(value: object) -> tuple[str, bool]:
    """(the supported release to run a session recorded from vLLM `value` as, exact?):
    the release itself when it is one (a patch release: its minor release), else the one
    whose behaviour differs from `value`'s in the fewest changes of CHANGES (on a tie the
    older one). Unparsable releases map to the newest one."""
    text = str(value or "").strip().lstrip("v")
    try:
        key = version_key(".".join(text.split(".")[:2]))
    except ValueError:
        return DEFAULT_VLLM_VERSION, False

    exact = ".".join(str(part) for part in key)
    if exact in SUPPORTED:
        return exact, True

    def differences(candidate: str) -> int:
        ckey = version_key(candidate)
        return sum((version_key(c.since) <= key) != (version_key(c.since) <= ckey) for c in CHANGES)

    return min(SUPPORTED, key=lambda v: (differences(v), version_key(v))), False


@cache
def release_features(version: str) -> ReleaseFeatures:
    key = version_key(normalize_version(version))
    flags = {c.flag: version_key(c.since) <= key for c in CHANGES}
    names = [f.name for f in fields(ReleaseFeatures) if f.name != "version"]
    return ReleaseFeatures(version=version, **{name: flags[name] for name in names})


def knob_available(knob: str, version: str) -> bool:
    """Whether `knob` exists on `version` (knobs outside the table exist everywhere)."""
    since = KNOB_SINCE.get(knob)
    return since is None or version_key(since) <= version_key(normalize_version(version))


def changes_between(a: str, b: str) -> list[Change]:
    """The changes one of releases `a` and `b` has and the other lacks, in table order."""
    fa, fb = release_features(a), release_features(b)
    return [c for c in CHANGES if getattr(fa, c.flag) != getattr(fb, c.flag)]


def features_reverting(version: str, flag: str, to: str) -> ReleaseFeatures:
    """`version`'s features with one change (`flag`) as release `to` has it: which change
    explains a difference between two releases is found by reverting each in turn."""
    return replace(release_features(version), **{flag: getattr(release_features(to), flag)})
