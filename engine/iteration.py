"""Build one step's IterationEvent from the plan scheduled and the output applied."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from engine.block_pool import BlockPool
from engine.config import SchedulerConfig
from engine.events import BlockChange, Finish, IterationEvent, KVStats, Preemption, Rejection
from engine.outputs import SchedulerOutput, UpdateResult


@dataclass(frozen=True, slots=True)
class StepTiming:
    """When a step started and what it cost (engine clock, seconds since start)."""

    t_start: float
    duration: float
    overhead_us: float
    forward_ms: float


@dataclass(frozen=True, slots=True)
class StepInputs:
    """What happened outside the scheduler since the previous step."""

    arrived: tuple[str, ...]
    rejected: tuple[Rejection, ...]
    simulated: bool
    config_version: int


@dataclass(frozen=True, slots=True)
class StepEnd:
    """The scheduler's queues when the step ends (after the update)."""

    num_running: int
    num_waiting: int
    num_output_placeholders: dict[str, int]
    """Async scheduling: req_id -> output placeholders, for requests that have some."""


def no_update() -> UpdateResult:
    """The update of a step that applied no batch output."""
    return UpdateResult([], [], {}, {}, [])


def build_iteration_event(
    output: SchedulerOutput,
    update: UpdateResult,
    updated_step: int | None,
    timing: StepTiming,
    inputs: StepInputs,
    end: StepEnd,
    pool: BlockPool,
    cfg: SchedulerConfig,
    kv_changes: bool = True,
) -> IterationEvent:
    """`output` is the plan scheduled in this step (possibly empty); `update` what the
    update applied in this step (for the batch of `updated_step`); `pool` the scheduler's
    block pool (its changed blocks are taken); `cfg` the scheduler knobs in force.
    `kv_changes` False: the changed blocks are taken and dropped, the event's
    `kv_changes` left empty (a run folded into figures alone, which no KV map reads)."""
    prefill = decode = hit_tokens = 0
    for chunk in output.chunks:
        if chunk.is_prefill:
            prefill += chunk.num_tokens
        else:
            decode += chunk.num_tokens
        hit_tokens += chunk.num_prefix_hit_tokens
    # tuple.__new__ straight from the pool's rows (BlockChange._make is Python-level).
    if kv_changes:
        changes = tuple(map(partial(tuple.__new__, BlockChange), pool.take_block_changes()))
    else:
        pool.take_changed_block_ids()
        changes = ()
    return IterationEvent(
        step=output.step,
        t_start=timing.t_start,
        duration=timing.duration,
        forward_ms=timing.forward_ms,
        overhead_us=timing.overhead_us,
        simulated=inputs.simulated,
        chunks=output.chunks,
        new_req_ids=output.new_req_ids,
        resumed_req_ids=output.resumed_req_ids,
        preempted=tuple(
            Preemption(r, "kv_blocks", lost)
            for r, lost in zip(output.preempted_req_ids, output.preempted_tokens_lost, strict=True)
        ),
        finished=tuple(
            Finish(r.request_id, r.get_finished_reason() or "") for r in update.finished
        ),
        arrived=inputs.arrived,
        rejected=inputs.rejected,
        sampled_req_ids=tuple(update.sampled_req_ids),
        num_running=output.num_running,
        num_waiting=output.num_waiting,
        num_running_end=end.num_running,
        num_waiting_end=end.num_waiting,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        num_scheduled_tokens=output.total_num_scheduled_tokens,
        max_num_seqs=cfg.max_num_seqs,
        prefill_tokens=prefill,
        decode_tokens=decode,
        kv=KVStats(
            pool.num_usable_blocks, output.kv_blocks_used, pool.num_cached_free_blocks, hit_tokens
        ),
        kv_blocks_used_end=pool.get_num_used_blocks(),
        kv_changes=changes,
        waiting_reasons=output.waiting_reasons,
        config_version=inputs.config_version,
        updated_step=updated_step,
        accepted_tokens=update.accepted_tokens,
        appended_tokens=update.appended_tokens,
        num_output_placeholders=end.num_output_placeholders,
        num_spec_tokens=output.num_spec_tokens,
        waiting_detail=output.waiting_detail,
        num_padding_tokens=output.num_padding_tokens,
        prefix_cache_queries=output.prefix_cache_queries,
        prefix_cache_hits=output.prefix_cache_hits,
    )
