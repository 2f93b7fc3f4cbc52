"""batchscope's vLLM adapter: `--scheduler-cls batchscope_vllm.ObservedScheduler` streams
every scheduler step of a vLLM v1 engine, releases 0.20 … 0.34, to a batchscope dashboard
(/ws/ingest), in whichever loop vLLM runs (sync, async scheduling, speculative decoding).

Install it next to vLLM with `pip install ./packaging/batchscope-vllm` (from a batchscope
checkout; it pulls only websockets; tested with vLLM 0.20.0, 0.33.0 and 0.34.0; the
release differences are found by feature detection, compat.py: where a vLLM attribute one
observation reads is missing, that observation is skipped, named and counted, the rest
observed). It imports only vLLM,
websockets, the standard library and batchscope's stdlib-only `protocol` package (the
codes, the envelope and the payloads every producer builds the same way), which that
distribution carries too.
Configuration: BATCHSCOPE_URL, BATCHSCOPE_TOKEN, BATCHSCOPE_NODE (default: the hostname),
BATCHSCOPE_NAME (the session's name), BATCHSCOPE_BUFFER_MB (frames kept for resending while
the dashboard is away; default 64). BATCHSCOPE_BUS=nats://HOST:PORT publishes to a NATS
JetStream fleet bus instead (bus.py; needs nats-py, the wheel's `bus` extra).

The scheduler classes are imported on first access, so `batchscope_vllm.sender` (the
websocket side, no vLLM) can be used and tested without vLLM installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from batchscope_vllm.scheduler import ObservedAsyncScheduler, ObservedScheduler

__all__ = ["ObservedAsyncScheduler", "ObservedScheduler"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from batchscope_vllm import scheduler

        return getattr(scheduler, name)
    raise AttributeError(f"module 'batchscope_vllm' has no attribute {name!r}")
