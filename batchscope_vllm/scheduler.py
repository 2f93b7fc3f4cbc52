"""vLLM 0.20 v1 schedulers that report every step to a batchscope dashboard.

    BATCHSCOPE_URL=ws://HOST:PORT/ws/ingest BATCHSCOPE_TOKEN=... \\
        vllm serve MODEL --scheduler-cls batchscope_vllm.ObservedScheduler

(it becomes vLLM's AsyncScheduler when async scheduling is on). BATCHSCOPE_NODE names
the node (default: the hostname), BATCHSCOPE_NAME the session, BATCHSCOPE_BUFFER_MB the
frames kept for resending (default 64). Without BATCHSCOPE_URL the scheduler is vLLM's,
unobserved.

The hooks run on vLLM's engine thread and never wait: they take references and cheap ints
(the SchedulerOutput, the returned EngineCoreOutputs, queue lengths, free KV blocks,
timestamps) and put one tuple per call on a bounded queue (`put_nowait`; a full queue
counts a drop). The sender thread (`sender.py`) builds and ships the frames.
"""

from __future__ import annotations

import os
import queue
import socket
import time
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine import EngineCoreOutputs
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request

from batchscope_vllm.sender import Sender

_perf = time.perf_counter


def _describe(sched: Scheduler) -> tuple[str, dict[str, Any]]:
    """(model, config) for the announce: the knobs that shape the schedule."""
    vc = sched.vllm_config
    sc, cc = vc.scheduler_config, vc.cache_config
    config = {
        "max_num_batched_tokens": sched.max_num_scheduled_tokens,
        "max_num_seqs": sched.max_num_running_reqs,
        "max_model_len": sched.max_model_len,
        "long_prefill_token_threshold": sc.long_prefill_token_threshold,
        "enable_chunked_prefill": sc.enable_chunked_prefill,
        "policy": str(sc.policy),
        "scheduler_reserve_full_isl": sc.scheduler_reserve_full_isl,
        "async_scheduling": isinstance(sched, AsyncScheduler),
        "num_speculative_tokens": int(getattr(sched, "num_spec_tokens", 0) or 0),
        "block_size": sched.block_size,
        "num_gpu_blocks": sched.kv_cache_manager.block_pool.num_gpu_blocks,
        "enable_prefix_caching": bool(cc.enable_prefix_caching),
    }
    return str(vc.model_config.model), config


def sender_from_env(sched: Scheduler) -> Sender | None:
    """The sender configured by BATCHSCOPE_* variables, started; None without a URL."""
    url = os.environ.get("BATCHSCOPE_URL", "").strip()
    if not url:
        return None
    node = os.environ.get("BATCHSCOPE_NODE", "").strip() or socket.gethostname()
    parallel = sched.vllm_config.parallel_config
    if getattr(parallel, "data_parallel_size", 1) > 1:  # one engine core (and session) per rank
        node = f"{node}-dp{getattr(parallel, 'data_parallel_rank', 0)}"
    model, config = _describe(sched)
    name = os.environ.get("BATCHSCOPE_NAME", "").strip() or f"{node} (vLLM {model})"
    sender = Sender(
        url=url,
        token=os.environ.get("BATCHSCOPE_TOKEN", ""),
        node=node,
        announce={
            "name": name[:200],
            "engine": "vllm",
            "runner": "vllm",
            "simulated": False,
            "model": model,
            # vLLM's `model_name` metric label, so the dashboard's /metrics matches the node's.
            "served_model_name": str(sched.vllm_config.model_config.served_model_name or model),
            "config": config,
        },
        max_tokens=sched.max_num_scheduled_tokens,
        max_seqs=sched.max_num_running_reqs,
        total_blocks=config["num_gpu_blocks"] - 1,  # block 0 is vLLM's null block
        history_bytes=int(float(os.environ.get("BATCHSCOPE_BUFFER_MB", "64")) * (1 << 20)),
    )
    sender.start()
    return sender


class ObserverMixin:
    """The hooks; mixed into vLLM's Scheduler (or AsyncScheduler) below."""

    def _bs_init(self) -> None:
        sched: Any = self
        self.batchscope: Sender | None = sender_from_env(sched)
        self._bs_put = self.batchscope.queue.put_nowait if self.batchscope else None
        self._bs_step = 0
        self._bs_preempted: list[tuple[str, int, str]] = []
        self._bs_in_schedule = False

    def _bs_offer(self, item: tuple[Any, ...]) -> None:
        try:
            self._bs_put(item)  # type: ignore[misc]
        except queue.Full:
            self.batchscope.dropped_in_queue += 1  # type: ignore[union-attr]

    def add_request(self, request: Request) -> None:
        sched: Any = self
        if self._bs_put is not None and request.request_id not in sched.requests:
            self._bs_offer(
                (
                    "a",
                    request.request_id,
                    request.num_prompt_tokens,
                    request.max_tokens,
                    request.priority,
                    _perf(),
                    self._bs_step,
                )
            )
        super().add_request(request)  # type: ignore[misc]

    def _preempt_request(self, request: Request, timestamp: float) -> None:
        if self._bs_put is not None:
            reason = "kv_blocks" if self._bs_in_schedule else "reset_prefix_cache"
            self._bs_preempted.append((request.request_id, request.num_computed_tokens, reason))
        super()._preempt_request(request, timestamp)  # type: ignore[misc]

    def schedule(self) -> SchedulerOutput:
        if self._bs_put is None:
            return super().schedule()  # type: ignore[misc,no-any-return]
        sched: Any = self
        t0 = _perf()
        self._bs_in_schedule = True
        try:
            out: SchedulerOutput = super().schedule()  # type: ignore[misc]
        finally:
            self._bs_in_schedule = False
        t1 = _perf()
        preempted, self._bs_preempted = self._bs_preempted, []
        step = self._bs_step
        self._bs_step = step + 1
        self._bs_offer(
            (
                "s",
                out,
                step,
                t0,
                t1,
                len(sched.running),
                len(sched.waiting) + len(sched.skipped_waiting),
                sched.kv_cache_manager.block_pool.get_num_free_blocks(),
                preempted,
            )
        )
        return out

    def update_from_output(
        self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput
    ) -> dict[int, EngineCoreOutputs]:
        if self._bs_put is None:
            return super().update_from_output(  # type: ignore[misc,no-any-return]
                scheduler_output, model_runner_output
            )
        sched: Any = self
        t2 = _perf()
        generated = _generated_counts(scheduler_output, model_runner_output)
        outputs: dict[int, EngineCoreOutputs] = super().update_from_output(  # type: ignore[misc]
            scheduler_output, model_runner_output
        )
        t3 = _perf()
        self._bs_offer(
            (
                "u",
                scheduler_output,
                outputs,
                generated,
                t2,
                t3,
                len(sched.running),
                len(sched.waiting) + len(sched.skipped_waiting),
                sched.kv_cache_manager.block_pool.get_num_free_blocks(),
            )
        )
        return outputs

    def close(self, timeout: float = 5.0) -> bool:
        """Flush what is queued to the dashboard (up to `timeout` s) and stop the sender.
        True when everything produced was delivered (or nothing is observed)."""
        sender, self._bs_put = self.batchscope, None
        return sender.close(timeout) if sender is not None else True

    def shutdown(self) -> None:
        self.close(timeout=2.0)
        super().shutdown()  # type: ignore[misc]


def _generated_counts(so: SchedulerOutput, mro: ModelRunnerOutput) -> dict[str, int] | None:
    """Tokens the runner produced per request whose drafts this output verifies, read
    before update_from_output trims them at a stop (accepted = produced - 1)."""
    spec = so.scheduled_spec_decode_tokens
    if not spec:
        return None
    index, sampled = mro.req_id_to_index, mro.sampled_token_ids
    out: dict[str, int] = {}
    for req_id in spec:
        i = index.get(req_id)
        if i is not None and sampled and i < len(sampled):
            out[req_id] = len(sampled[i])
    return out


def _async_on(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    vllm_config = kwargs.get("vllm_config", args[0] if args else None)
    sc = getattr(vllm_config, "scheduler_config", None)
    return bool(getattr(sc, "async_scheduling", False))


class ObservedScheduler(ObserverMixin, Scheduler):
    """vLLM's scheduler, reporting each step to the dashboard at BATCHSCOPE_URL.

    `--scheduler-cls batchscope_vllm.ObservedScheduler` observes a node in whichever loop
    vLLM chose: when the config has async scheduling on (vLLM 0.20's default) this builds
    an ObservedAsyncScheduler (vLLM's AsyncScheduler), so attaching it never switches the
    node to sync scheduling."""

    def __new__(cls, *args: Any, **kwargs: Any) -> ObservedScheduler:
        if cls is ObservedScheduler and _async_on(args, kwargs):
            cls = ObservedAsyncScheduler
        return super().__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._bs_init()


class ObservedAsyncScheduler(ObservedScheduler, AsyncScheduler):
    """vLLM's AsyncScheduler (async scheduling on), reporting each step likewise."""
