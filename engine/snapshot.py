"""The engine's full state for a late joiner (`EngineSnapshot`: requests, block map,
config, queues), read from the engine between steps."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.events import BlockChange, EngineSnapshot, RequestRow

if TYPE_CHECKING:
    from engine.engine import Engine


def build_snapshot(engine: Engine) -> EngineSnapshot:
    """The snapshot of `engine` now."""
    sched = engine.scheduler
    kv = sched.kv_cache_manager
    pool = kv.block_pool
    rows = tuple(
        RequestRow(
            req_id=r.request_id,
            status=r.status.name,
            num_prompt_tokens=r.num_prompt_tokens,
            num_tokens=r.num_tokens,
            num_computed_tokens=r.num_computed_tokens,
            max_tokens=r.max_tokens,
            priority=r.priority,
            num_preemptions=r.num_preemptions,
            num_cached_tokens=max(r.num_cached_tokens, 0),
            block_ids=tuple(kv.get_block_ids(r.request_id)),
        )
        for r in sched.requests.values()
    )
    blocks = tuple(
        BlockChange(b.block_id, pool.block_state(b), b.owner, b.ref_cnt) for b in pool.blocks[1:]
    )
    return EngineSnapshot(
        step=engine.step_index,
        t=engine.now(),
        config=engine.config.as_dict(),
        config_version=engine.config_version,
        paused=engine.paused,
        simulated=engine.runner.simulated,
        running=tuple(r.request_id for r in sched.running),
        waiting=tuple(r.request_id for r in sched.waiting),
        requests=rows,
        blocks=blocks,
    )
