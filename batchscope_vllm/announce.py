"""What a node says about itself (the announce), and the sender BATCHSCOPE_* configure.

The announce carries the node's vLLM release (as installed), the engine loop vLLM chose
(`sync` or `async`, `+spec` with speculative decoding), the vLLM scheduler class the
observer extends, the observations degraded on this release so far (`degraded`: name ->
times skipped, compat.Degraded) and the scheduler's knobs: the common ones under our engine's names,
plus those only some releases have (max_num_active_seqs, watermark,
prefill_schedule_interval, ...), where this node's release has them.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from batchscope_vllm import compat
from batchscope_vllm.sender import Sender
from batchscope_vllm.waiting import Limits

log = logging.getLogger("batchscope_vllm")


def vllm_class(sched: Any) -> str:
    """The vLLM scheduler class the observer extends (the first of vLLM's in the MRO)."""
    for cls in type(sched).__mro__:
        if cls.__module__.startswith("vllm."):
            return f"{cls.__module__}.{cls.__qualname__}"
    return f"{type(sched).__module__}.{type(sched).__qualname__}"


def engine_loop(sched: Any) -> str:
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    loop = "async" if isinstance(sched, AsyncScheduler) else "sync"
    return loop + ("+spec" if int(getattr(sched, "num_spec_tokens", 0) or 0) else "")


def describe(sched: Any) -> tuple[str, dict[str, Any]]:
    """(model, config) for the announce: the knobs that shape the schedule."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    vc = sched.vllm_config
    sc, cc = vc.scheduler_config, vc.cache_config
    config = {
        "max_num_batched_tokens": sched.max_num_scheduled_tokens,
        "max_num_seqs": sched.max_num_running_reqs,
        "max_model_len": sched.max_model_len,
        "long_prefill_token_threshold": sc.long_prefill_token_threshold,
        "enable_chunked_prefill": sc.enable_chunked_prefill,
        "policy": str(getattr(sc.policy, "value", sc.policy)),
        "scheduler_reserve_full_isl": bool(getattr(sc, "scheduler_reserve_full_isl", False)),
        "async_scheduling": isinstance(sched, AsyncScheduler),
        "num_speculative_tokens": int(getattr(sched, "num_spec_tokens", 0) or 0),
        "block_size": sched.block_size,
        "num_gpu_blocks": sched.kv_cache_manager.block_pool.num_gpu_blocks,
        "enable_prefix_caching": bool(cc.enable_prefix_caching),
        **compat.scheduler_knobs(sc),
    }
    return str(vc.model_config.model), config


def limits(sched: Any, lay: compat.Layout, config: dict[str, Any]) -> Limits:
    """The knobs the waiting reasons are computed with."""
    sc = sched.vllm_config.scheduler_config
    return Limits(
        max_tokens=int(sched.max_num_scheduled_tokens),
        max_batched=int(sc.max_num_batched_tokens),
        block_size=int(sched.block_size),
        usable_blocks=int(config["num_gpu_blocks"]) - 1,
        max_model_len=int(sched.max_model_len),
        chunked=bool(sc.enable_chunked_prefill),
        threshold=int(sc.long_prefill_token_threshold or 0),
        reserve_full_isl=bool(getattr(sched, "scheduler_reserve_full_isl", False)),
        lookahead=int(getattr(sched, "num_lookahead_tokens", 0) or 0),
        num_spec=int(getattr(sched, "num_spec_tokens", 0) or 0),
        policy=str(config["policy"]),
        lay=lay,
    )


def sender_from_env(sched: Any, lay: compat.Layout) -> Sender | None:
    """The sender configured by BATCHSCOPE_* variables, started; None without a URL.
    BATCHSCOPE_BUS (nats://HOST:PORT) publishes to a fleet bus (bus.py) instead of
    BATCHSCOPE_URL's dashboard; BATCHSCOPE_BUS_DETAIL=always streams full frames always."""
    bus = os.environ.get("BATCHSCOPE_BUS", "").strip()
    url = os.environ.get("BATCHSCOPE_URL", "").strip()
    if not url and not bus:
        return None
    if bus and not bus.startswith("nats://"):
        log.error("batchscope: BATCHSCOPE_BUS=%r is not a nats:// URL; not observing", bus)
        return None
    node = os.environ.get("BATCHSCOPE_NODE", "").strip() or socket.gethostname()
    parallel = sched.vllm_config.parallel_config
    if getattr(parallel, "data_parallel_size", 1) > 1:  # one engine core (and session) per rank
        node = f"{node}-dp{getattr(parallel, 'data_parallel_rank', 0)}"
    model, config = describe(sched)
    name = os.environ.get("BATCHSCOPE_NAME", "").strip() or f"{node} (vLLM {model})"
    announce = {
        "name": name[:200],
        "engine": "vllm",
        "runner": "vllm",
        "simulated": False,
        "model": model,
        # vLLM's `model_name` metric label, so the dashboard's /metrics matches the node's.
        "served_model_name": str(sched.vllm_config.model_config.served_model_name or model),
        "vllm_version": compat.vllm_version(),
        "engine_loop": engine_loop(sched),
        "scheduler_class": vllm_class(sched),
        "config": config,
        # The observations this vLLM lacks a read for (compat.Degraded): live counts,
        # serialized at each (re)connect's announce.
        "degraded": lay.degraded,
    }
    common: dict[str, Any] = {
        "max_tokens": sched.max_num_scheduled_tokens,
        "max_seqs": sched.max_num_running_reqs,
        "total_blocks": config["num_gpu_blocks"] - 1,  # block 0 is vLLM's null block
        "history_bytes": int(float(os.environ.get("BATCHSCOPE_BUFFER_MB", "64")) * (1 << 20)),
        "limits": limits(sched, lay, config),
    }
    sender: Sender
    if bus:
        try:
            from batchscope_vllm.bus import BusSender
        except ImportError:
            log.error(
                "batchscope: BATCHSCOPE_BUS needs nats-py "
                "(pip install './packaging/batchscope-vllm[bus]'); not observing"
            )
            return None
        detail = os.environ.get("BATCHSCOPE_BUS_DETAIL", "").strip() or "on-demand"
        sender = BusSender(bus, node, announce, detail=detail, **common)
    else:
        token = os.environ.get("BATCHSCOPE_TOKEN", "")
        sender = Sender(url=url, token=token, node=node, announce=announce, **common)
    sender.start()
    return sender
