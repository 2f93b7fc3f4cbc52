"""Builders for scheduler tests: literal configs, requests, a one-step driver, and the
events of a scenario file run to the end."""

from __future__ import annotations

from pathlib import Path

from engine.config import CacheConfig, EngineConfig, SchedulerConfig, SchedulingPolicy
from engine.engine import Engine
from engine.events import Event, ListSink
from engine.outputs import SchedulerOutput
from engine.releases import DEFAULT_VLLM_VERSION
from engine.request import Request, RequestStatus, SamplingParams
from engine.runner.sim import SimRunner
from engine.scenario import load_scenario
from engine.scheduler import Scheduler
from engine.schedulers import create_scheduler

_runner = SimRunner()


def make_config(
    *,
    max_num_batched_tokens: int = 64,
    max_num_seqs: int = 8,
    max_model_len: int = 256,
    long_prefill_token_threshold: int = 0,
    enable_chunked_prefill: bool = True,
    policy: str = "fcfs",
    scheduler_reserve_full_isl: bool = True,
    block_size: int = 4,
    num_gpu_blocks: int = 100,
    enable_prefix_caching: bool = False,
    async_scheduling: bool = False,
    num_speculative_tokens: int = 0,
    vllm_version: str = DEFAULT_VLLM_VERSION,
    max_num_active_seqs: int = 0,
    watermark: float = 0.0,
    prefill_schedule_interval: int = 1,
    long_prefill_token_threshold_adaptive: bool = False,
) -> EngineConfig:
    return EngineConfig(
        vllm_version=vllm_version,
        scheduler=SchedulerConfig(
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len,
            long_prefill_token_threshold=long_prefill_token_threshold,
            enable_chunked_prefill=enable_chunked_prefill,
            policy=SchedulingPolicy(policy),
            scheduler_reserve_full_isl=scheduler_reserve_full_isl,
            async_scheduling=async_scheduling,
            num_speculative_tokens=num_speculative_tokens,
            max_num_active_seqs=max_num_active_seqs,
            watermark=watermark,
            prefill_schedule_interval=prefill_schedule_interval,
            long_prefill_token_threshold_adaptive=long_prefill_token_threshold_adaptive,
        ),
        cache=CacheConfig(
            block_size=block_size,
            num_gpu_blocks=num_gpu_blocks,
            enable_prefix_caching=enable_prefix_caching,
        ),
    )


def make_scheduler(**kwargs: object) -> Scheduler:
    return create_scheduler(make_config(**kwargs))  # type: ignore[arg-type]


_arrivals = [0]


def make_request(
    scheduler: Scheduler,
    req_id: str,
    prompt: int | list[int],
    max_tokens: int = 4,
    priority: int = 0,
) -> Request:
    tokens = prompt if isinstance(prompt, list) else [1000 + i for i in range(prompt)]
    cache = scheduler.config.cache
    _arrivals[0] += 1
    request = Request(
        req_id,
        tokens,
        SamplingParams(max_tokens=max_tokens),
        arrival_time=float(_arrivals[0]),
        priority=priority,
        block_size=cache.block_size,
        enable_hashing=cache.enable_prefix_caching,
    )
    scheduler.add_request(request)
    return request


def step(scheduler: Scheduler) -> SchedulerOutput:
    """One full step: schedule, run the SimRunner, apply its output."""
    output = scheduler.schedule()
    scheduler.update_from_output(output, _runner.execute(output))
    return output


def reasons(scheduler: Scheduler, output: SchedulerOutput) -> dict[str, str]:
    """`output`'s waiting reasons resolved for every request waiting after it (its
    compact form names only the exceptions to the step's default)."""
    return output.waiting_reasons.resolve(r.request_id for r in scheduler.waiting)


def scheduled(output: SchedulerOutput) -> dict[str, int]:
    return {c.req_id: c.num_tokens for c in output.chunks}


def check_invariants(scheduler: Scheduler) -> None:
    """Free + used == usable; ref counts == table membership; queues disjoint."""
    kv = scheduler.kv_cache_manager
    pool = kv.block_pool
    refs: dict[int, int] = {}
    for blocks in kv.req_to_blocks.values():
        for b in blocks:
            refs[b.block_id] = refs.get(b.block_id, 0) + 1
    for block in pool.blocks[1:]:
        assert block.ref_cnt == refs.get(block.block_id, 0), block
    free_ids = pool.free_block_queue.block_ids()
    assert len(free_ids) == pool.get_num_free_blocks()
    assert all(pool.blocks[i].ref_cnt == 0 for i in free_ids)
    assert len(free_ids) + sum(1 for n in refs.values() if n) == pool.num_usable_blocks
    cached_free = sum(1 for i in free_ids if pool.blocks[i].block_hash is not None)
    assert cached_free == pool.num_cached_free_blocks
    # The lookup map holds, for each cached hash, the first block of its duplicates.
    table = pool.cached_block_hash_to_block
    assert pool.first_cached_block.keys() == table.keys()
    for block_hash, entry in table.items():
        assert pool.first_cached_block[block_hash] is next(iter(entry.values()))
        assert all(b.block_hash == block_hash for b in entry.values())
    running = {r.request_id for r in scheduler.running}
    waiting = {r.request_id for r in scheduler.waiting}
    assert not running & waiting
    assert all(r.status == RequestStatus.RUNNING for r in scheduler.running)
    assert len(scheduler.running) <= scheduler.max_num_running_reqs
    for request in scheduler.requests.values():
        assert request.num_output_placeholders >= 0, request
        assert request.num_computed_tokens <= request.num_tokens_with_spec + (
            request.num_output_placeholders
        ), request


def scenario_events(path: Path) -> list[Event]:
    """Run a scenario file's requests to the end on the SimRunner: the events emitted."""
    scenario = load_scenario(path)
    sink = ListSink()
    engine = Engine(scenario.config, SimRunner(), sink)
    for req in scenario.requests:
        engine.add_request(req.id, list(req.prompt_token_ids), req.sampling_params)
    while engine.has_unfinished_requests():
        engine.step()
    return list(sink.events)


def busy_run(
    vllm_version: str = "0.34", steps: int = 120
) -> tuple[list[Event], dict[int, list[str]]]:
    """An overloaded run on the SimRunner with every kind of waiting reason: bursts of
    arrivals (some sharing a prefix, for cache-aware admission) into a small KV pool
    (preemptions, kv_blocks), a pause, and aborts of waiting requests between steps.
    Returns the events as emitted and, per step, the ids of the requests waiting after
    it (read off the scheduler: what a full waiting-reasons map named)."""
    cfg = make_config(
        vllm_version=vllm_version,
        max_num_batched_tokens=32,
        max_num_seqs=6,
        num_gpu_blocks=40,
        enable_prefix_caching=True,
        max_model_len=128,
    )
    if vllm_version == "0.34":
        cfg = cfg.with_updates(cache_aware_admission_window=4, cache_aware_admission_threshold=0.0)
    sink = ListSink()
    engine = Engine(cfg, SimRunner(), sink)
    sched = engine.scheduler
    shared = list(range(500, 524))
    waiting: dict[int, list[str]] = {}
    n = 0
    for i in range(steps):
        if i % 5 == 0 and i < steps - 40:
            for _ in range(6):
                prompt = shared + [n] * (n % 3 * 8) if n % 2 else [n % 50 + 1] * (12 + n % 20)
                engine.add_request(f"r{n}", prompt, SamplingParams(max_tokens=4 + n % 9))
                n += 1
        if i % 17 == 16:
            engine.abort([r.request_id for r in list(sched.waiting)[-2:]])
        sched.paused = i in (30, 31)
        ev = engine.step()
        waiting[ev.step] = [r.request_id for r in sched.waiting]
    return list(sink.events), waiting
