"""vLLM v1 schedulers (releases 0.20 … 0.34) that report every step to a batchscope dashboard.

    BATCHSCOPE_URL=ws://HOST:PORT/ws/ingest BATCHSCOPE_TOKEN=... \\
        vllm serve MODEL --scheduler-cls batchscope_vllm.ObservedScheduler

(it becomes vLLM's AsyncScheduler when async scheduling is on). BATCHSCOPE_NODE names
the node (default: the hostname), BATCHSCOPE_NAME the session, BATCHSCOPE_BUFFER_MB the
frames kept for resending (default 64). Without BATCHSCOPE_URL the scheduler is vLLM's,
unobserved.

Each hook passes vLLM's arguments through as they come (`schedule(throttle_prefills)` on
0.24+, `_preempt_request(..., drop_stale_output=...)` on 0.27+, whatever a release adds),
and calls vLLM exactly once, outside any guard: vLLM's own exceptions are vLLM's. The
observation around the call is guarded: an exception there is logged once with its
traceback, counted (`observer_errors`, in the sender's stats and its closing frame), and
stops observing this node (the hooks become pass-through, the sender closes the session);
vLLM serves on. The release differences the hooks need are found once, by feature
detection (compat.py); where a vLLM attribute one observation reads is missing or changed,
only that observation is skipped, named and counted (compat.Degraded: the announce, the
sender's stats and its closing frame carry the counts) and the rest is observed.

The hooks run on vLLM's engine thread and never wait: they take references and cheap ints
(the SchedulerOutput, the returned EngineCoreOutputs, a new request's prompt token ids,
copies of the waiting queues, free KV blocks, timestamps) and append one tuple per call
to the sender's bounded intake (`Sender.offer`: a deque append, no lock and no wake-up;
a full intake counts a drop); observations.py takes them. The sender thread
(`sender_core.py`) builds and ships the frames, in batches.

A stop signal (SIGINT/SIGTERM) to vLLM's engine-core process ends the session at once
(stop.py; in drain mode once vLLM's last request is done); `shutdown()` does too, if the
engine core gets that far.
"""

from __future__ import annotations

import logging
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from batchscope_vllm import compat
from batchscope_vllm.announce import sender_from_env
from batchscope_vllm.observations import StepObservations
from batchscope_vllm.sender import Sender
from batchscope_vllm.stop import chain_stop_signals
from batchscope_vllm.waiting import GATE_STATUSES

log = logging.getLogger("batchscope_vllm")
STOP_TIMEOUT_S = 2.0
"""At a stop signal: how long the sender may take to deliver what is queued and the
closing frame."""
STOP_WAIT_S = 1.0
"""How long the stop signal's handler waits for that (the engine thread idle, so the
sender has the GIL) before vLLM's own handler runs: vLLM's API server may kill the
engine core within milliseconds of the signal."""


class ObserverMixin(StepObservations):
    """The hooks; mixed into vLLM's Scheduler (or AsyncScheduler) below. Each hook's
    observation is a method of its own (`_bs_on_*`, observations.py), called inside the
    guard."""

    batchscope: Sender | None = None
    _bs_failures = 0

    def _bs_init(self) -> None:
        self.batchscope = None
        self._bs_put = None
        self._bs_step = 0
        self._bs_preempted = []
        self._bs_in_schedule = False
        self._bs_failures = 0
        self._bs_stop_pending = False
        try:
            self._bs_lay = compat.layout(self, GATE_STATUSES)
            self._bs_total_blocks = int(self.kv_cache_manager.block_pool.num_gpu_blocks) - 1  # type: ignore[attr-defined]
            sender = sender_from_env(self, self._bs_lay)
        except Exception:
            self._bs_fail("__init__")
            return
        if sender is not None:
            self.batchscope = sender
            sender.on_failure = self._bs_detach
            self._bs_put = sender.offer
            try:
                chain_stop_signals(self._bs_on_stop_signal)
            except Exception:
                self._bs_fail("__init__")

    # ------------------------------------------------------------ guard
    def _bs_detach(self) -> None:
        self._bs_put = None

    def _bs_fail(self, hook: str) -> None:
        """Called from an `except` block: stop observing, log (once) and count it."""
        self._bs_put = None
        sender = self.batchscope
        if self._bs_failures or (sender is not None and sender.failed is not None):
            return  # observing had already stopped (a hook racing the sender's failure)
        self._bs_failures = 1
        log.exception(
            "batchscope: observing failed in %s; this node is no longer observed (vLLM serves on)",
            hook,
        )
        if sender is not None:
            sender.fail(hook)

    @property
    def observer_errors(self) -> int:
        """Exceptions inside observation (hooks and sender thread) so far."""
        sender = self.batchscope
        return max(self._bs_failures, sender.observer_errors if sender else 0)

    # ------------------------------------------------------------ hooks
    def add_request(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        if self._bs_put is not None:
            try:
                self._bs_on_add(request)
            except Exception:
                self._bs_fail("add_request")
        return super().add_request(request, *args, **kwargs)  # type: ignore[misc]

    def _preempt_request(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        if self._bs_put is not None:
            try:
                self._bs_on_preempt(request)
            except Exception:
                self._bs_fail("_preempt_request")
        return super()._preempt_request(request, *args, **kwargs)  # type: ignore[misc]

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        if self._bs_put is None:
            return super().schedule(*args, **kwargs)  # type: ignore[misc]
        try:
            before = self._bs_before_schedule(args, kwargs)
        except Exception:
            self._bs_fail("schedule")
            return super().schedule(*args, **kwargs)  # type: ignore[misc]
        self._bs_in_schedule = True
        try:
            out = super().schedule(*args, **kwargs)  # type: ignore[misc]
        finally:
            self._bs_in_schedule = False
        if self._bs_put is not None:  # (a preemption's observation may have failed)
            try:
                self._bs_on_schedule(out, before)
            except Exception:
                self._bs_fail("schedule")
        return out

    def update_from_output(
        self, scheduler_output: Any, model_runner_output: Any, *args: Any, **kwargs: Any
    ) -> Any:
        if self._bs_put is None:
            return super().update_from_output(  # type: ignore[misc]
                scheduler_output, model_runner_output, *args, **kwargs
            )
        try:
            before = self._bs_before_update(scheduler_output, model_runner_output)
        except Exception:
            self._bs_fail("update_from_output")
            before = None
        outputs = super().update_from_output(  # type: ignore[misc]
            scheduler_output, model_runner_output, *args, **kwargs
        )
        if self._bs_put is not None and before is not None:
            try:
                self._bs_on_update(scheduler_output, outputs, before)
                if self._bs_stop_pending and not self.has_requests():  # type: ignore[attr-defined]
                    self._bs_stop()  # drained after a stop signal
            except Exception:
                self._bs_fail("update_from_output")
        return outputs

    def shutdown(self, *args: Any, **kwargs: Any) -> Any:
        try:
            self.close(timeout=2.0)
        except Exception:
            self._bs_fail("shutdown")
        return super().shutdown(*args, **kwargs)  # type: ignore[misc]

    def _bs_on_stop_signal(self) -> None:
        """SIGINT/SIGTERM in vLLM's engine-core process (stop.py: in the signal handler,
        before vLLM's). Abort mode (`--shutdown-timeout 0`, or nothing in flight): the
        session ends with what was queued, and the handler waits up to STOP_WAIT_S for the
        closing frame to go out. Drain mode: once vLLM has no request left
        (`update_from_output`), so the drained steps are recorded."""
        if self._bs_put is None or self._bs_stop_pending:
            return  # (not observing, or a second signal)
        sched: Any = self
        drain = float(getattr(sched.vllm_config, "shutdown_timeout", 0) or 0)
        if drain > 0 and sched.has_requests():
            self._bs_stop_pending = True
        else:
            self._bs_stop()
            if self.batchscope is not None:
                self.batchscope.wait_flushed(STOP_WAIT_S)

    def _bs_stop(self) -> None:
        self._bs_put = None
        if self.batchscope is not None:
            self.batchscope.request_stop(STOP_TIMEOUT_S)

    def close(self, timeout: float = 5.0) -> bool:
        """End the session (a closing frame), flush what is queued to the dashboard (up to
        `timeout` s) and stop the sender. True when everything produced was delivered (or
        nothing is observed)."""
        sender, self._bs_put = self.batchscope, None
        return sender.close(timeout) if sender is not None else True


class ObservedScheduler(ObserverMixin, Scheduler):  # type: ignore[misc,unused-ignore]
    """vLLM's scheduler, reporting each step to the dashboard at BATCHSCOPE_URL.

    `--scheduler-cls batchscope_vllm.ObservedScheduler` observes a node in whichever loop
    vLLM chose: when the config has async scheduling on this builds an
    ObservedAsyncScheduler (vLLM's AsyncScheduler), so attaching it never switches the
    node to sync scheduling."""

    def __new__(cls, *args: Any, **kwargs: Any) -> ObservedScheduler:
        if cls is ObservedScheduler and compat.async_scheduling_on(args, kwargs):
            cls = ObservedAsyncScheduler
        obj: ObservedScheduler = super().__new__(cls)
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._bs_init()


class ObservedAsyncScheduler(ObservedScheduler, AsyncScheduler):  # type: ignore[misc,unused-ignore]
    """vLLM's AsyncScheduler (async scheduling on), reporting each step likewise."""
