"""EngineCore: runs an Engine in its own thread, the single writer of scheduler and KV
state. Others talk to it only through `submit(command)`, which never blocks; results come
back on a concurrent.futures.Future that the caller may await (the engine never waits).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from engine.commands import (
    Abort,
    AddRequest,
    AddRequests,
    Command,
    Pause,
    Resume,
    Shutdown,
    Step,
    UpdateConfig,
)
from engine.engine import Engine
from engine.faults import SchedulerAssertion

BeforeStep = Callable[[Engine], None]
OnFailure = Callable[[SchedulerAssertion], None]
BACKLOG_WAIT_S = 0.002


class EngineCore:
    def __init__(
        self,
        engine: Engine,
        *,
        realtime: bool = True,
        speed: float = 1.0,
        idle_wait_s: float = 0.05,
        before_step: BeforeStep | None = None,
        backlog: Callable[[], bool] | None = None,
        on_failure: OnFailure | None = None,
    ) -> None:
        """`realtime`: a simulated runner's modelled step time is waited out, so a live
        view of the SimRunner moves at model speed rather than thousands of steps/s."""
        self.engine = engine
        self.realtime = realtime
        self.speed = speed
        if realtime:
            # Inside the step: its first tokens come at its end, after the modelled time.
            engine.pace = self._wait_out
        self.idle_wait_s = idle_wait_s
        self.before_step = before_step
        self.backlog = backlog
        """A flat-out simulated engine has no pace of its own: while this says its frames
        are piling up unsent, it waits for them instead of dropping them."""
        self._commands: queue.SimpleQueue[tuple[Command, Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.paused = False
        self._steps_requested = 0
        self.error: BaseException | None = None
        self.on_failure = on_failure
        """Told, on the engine thread, when vLLM's scheduler would fail an assertion: the
        engine steps no more (as vLLM's would stop) and says so; commands still answer."""
        self.failure: SchedulerAssertion | None = None

    # -------------------------------------------------------------- control
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="engine-core", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        if self._thread is None:
            return
        self.submit(Shutdown())
        self._thread.join(timeout)
        self._thread = None

    def submit(self, command: Command) -> Future[Any]:
        future: Future[Any] = Future()
        self._commands.put((command, future))
        return future

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ----------------------------------------------------------------- loop
    def _run(self) -> None:
        engine = self.engine
        try:
            while not self._stopping:
                self._drain(block=False)
                if self._stopping:
                    break
                if self.before_step is not None and not self.paused:
                    self.before_step(engine)
                runnable = (
                    self.failure is None
                    and engine.has_unfinished_requests()
                    and (not self.paused or self._steps_requested > 0)
                )
                if not runnable:
                    self._drain(block=True)
                    continue
                if self.backlog is not None and self.backlog():
                    self._drain(block=True, timeout=BACKLOG_WAIT_S)
                    continue
                if self.paused:
                    self._steps_requested -= 1
                try:
                    engine.step()
                except SchedulerAssertion as fault:
                    self._fail(fault)
                    continue
                # Still hand the GIL over once per step, so the event loop (the hub, the
                # web) is never starved by this thread (a realtime simulation waited out
                # its modelled step time inside the step: _wait_out).
                time.sleep(0)
        except BaseException as exc:  # surfaced to the web side via `error`
            self.error = exc
            raise

    def _fail(self, fault: SchedulerAssertion) -> None:
        """vLLM's engine stops at this assertion: ours holds still, paused, and says why."""
        self.failure = fault
        self._set_paused(True)
        if self.on_failure is not None:
            self.on_failure(fault)

    def _wait_out(self, forward_ms: float) -> None:
        """A simulated forward pass lasts its modelled time (at `speed`)."""
        time.sleep(forward_ms / 1000.0 / self.speed)

    def _set_paused(self, paused: bool) -> None:
        self.paused = paused
        self._steps_requested = 0

    def _drain(self, block: bool, timeout: float | None = None) -> None:
        try:
            if block:
                wait = self.idle_wait_s if timeout is None else timeout
                item = self._commands.get(timeout=wait)
                self._apply(*item)
            while True:
                self._apply(*self._commands.get_nowait())
        except queue.Empty:
            return

    def _apply(self, command: Command, future: Future[Any]) -> None:
        engine = self.engine
        try:
            result: Any = None
            if isinstance(command, AddRequest):
                result = engine.add_request(
                    command.req_id,
                    command.prompt_token_ids,
                    command.sampling_params,
                    command.priority,
                )
            elif isinstance(command, AddRequests):
                result = [
                    engine.add_request(c.req_id, c.prompt_token_ids, c.sampling_params, c.priority)
                    for c in command.items
                ]
            elif isinstance(command, Abort):
                result = engine.abort(command.req_ids)
            elif isinstance(command, UpdateConfig):
                result = engine.update_config(**command.changes)
            elif isinstance(command, Pause):
                self._set_paused(True)
            elif isinstance(command, Resume | Step) and self.failure is not None:
                raise RuntimeError(f"the engine stopped: {self.failure}")
            elif isinstance(command, Resume):
                self._set_paused(False)
            elif isinstance(command, Step):
                self._set_paused(True)
                self._steps_requested += command.n
            elif isinstance(command, Shutdown):
                self._stopping = True
                # The session ends: what is still in flight is recorded as aborted.
                result = engine.stop()
            future.set_result(result)
        except Exception as exc:
            future.set_exception(exc)
