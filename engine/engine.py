"""Engine: one synchronous step = schedule -> runner.execute -> update -> events.

`EngineCore` (engine_core.py) drives this from its own thread; the offline simulator
drives it directly. The requests' lifecycle marks are made in engine.request_marks, the
step's IterationEvent in engine.iteration.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from engine.batch_queue import BatchQueue
from engine.config import EngineConfig
from engine.events import (
    ConfigEvent,
    EventSink,
    IterationEvent,
    NullSink,
    Rejection,
    RequestEvent,
)
from engine.iteration import StepEnd, StepInputs, StepTiming, build_iteration_event, no_update
from engine.outputs import ModelRunnerOutput, SchedulerOutput, UpdateResult
from engine.releases import ReleaseFeatures
from engine.request import Request, RequestStatus, SamplingParams
from engine.request_marks import abort_detail, abort_marks, marks_of_step, text
from engine.runner.base import ChecksTokenIds, Drafter, HasTokenizer, ModelRunner
from engine.schedulers import create_scheduler
from engine.virtual_clock import VirtualClock
from protocol.codes import RequestMark
from protocol.lifecycle import Mark

Clock = Callable[[], float]


class Engine:
    def __init__(
        self,
        config: EngineConfig,
        runner: ModelRunner,
        sink: EventSink | None = None,
        clock: Clock = time.perf_counter,
        features: ReleaseFeatures | None = None,
        kv_changes: bool = True,
    ) -> None:
        """`kv_changes` False: events carry no block changes (IterationEvent.kv_changes
        empty), for a run whose sink folds figures only and draws no KV map."""
        self.scheduler = create_scheduler(config, features)
        self.kv_changes = kv_changes
        self.runner = runner
        # The runner's optional capabilities (engine.runner.base), looked up once.
        self._id_checker = runner if isinstance(runner, ChecksTokenIds) else None
        self._tokenizer = runner.tokenizer if isinstance(runner, HasTokenizer) else None
        self._drafter = runner if isinstance(runner, Drafter) else None
        self.sink: EventSink = sink or NullSink()
        self.clock = clock
        self._virtual = clock if isinstance(clock, VirtualClock) else None
        """A clock that moves only when told: the runner's modelled time moves it."""
        self.pace: Callable[[float], None] | None = None
        """Set by EngineCore for a realtime simulation: waits out a simulated forward
        pass (its modelled ms) inside the step, so the step lasts it, as a device's would."""
        self.t0 = clock()
        self.step_index = 0
        self.config_version = 0
        self._num_arrivals = 0
        self._arrived: list[str] = []
        self._rejected: list[Rejection] = []
        self._first_token_seen: set[str] = set()
        self.batch_queue = BatchQueue()
        """Async scheduling: batches submitted whose output is not applied yet."""

    @property
    def config(self) -> EngineConfig:
        return self.scheduler.config

    def now(self) -> float:
        return self.clock() - self.t0

    # ------------------------------------------------------------ commands
    def add_request(
        self,
        req_id: str,
        prompt_token_ids: Sequence[int],
        sampling_params: SamplingParams,
        priority: int = 0,
        arrival_t: float | None = None,
    ) -> str | None:
        """Queue a request for the next step. Returns a rejection reason, or None.

        `arrival_t`: when it reached the engine (session seconds, at most now; default
        now), for a caller that adds arrivals due since the last step (a trace, a re-run):
        its `arrived` mark then keeps the time it was due, not the step that took it."""
        sched = self.scheduler
        reason: str | None
        if req_id in sched.requests:
            reason = f"duplicate request id {req_id!r}"
        elif sampling_params.max_tokens <= 0:
            reason = "max_tokens must be > 0"
        else:
            reason = sched.rejection_reason(len(prompt_token_ids), sampling_params.max_tokens)
        if reason is None and self._id_checker is not None:
            try:
                self._id_checker.check_token_ids(prompt_token_ids)
            except ValueError as exc:
                reason = str(exc)
        now = self.now()
        if arrival_t is not None:
            now = min(now, arrival_t)
        if reason is not None:
            self._rejected.append(Rejection(req_id, reason))
            self.sink.emit(
                RequestEvent(req_id, RequestMark.REJECTED, self.step_index, now, {"reason": reason})
            )
            return reason
        cache = self.config.cache
        request = Request(
            req_id,
            prompt_token_ids,
            sampling_params,
            # Arrival order breaks priority ties; a counter keeps it exact and replayable.
            arrival_time=float(self._num_arrivals),
            priority=priority,
            block_size=cache.block_size,
            enable_hashing=cache.enable_prefix_caching,
            arrival_step=self.step_index,
        )
        self._num_arrivals += 1
        sched.add_request(request)
        self._arrived.append(req_id)
        trace_prompt = request.trace_prompt
        detail = {
            "num_prompt_tokens": len(prompt_token_ids),
            "max_tokens": sampling_params.max_tokens,
            "priority": priority,
            # Enough to re-run the arrival exactly (prefix caching depends on content): a
            # trace's prompt by its block chain, never its (up to 128k) tokens.
            **(
                {"trace_prompt": trace_prompt.as_dict()}
                if trace_prompt is not None
                else {"prompt_token_ids": list(prompt_token_ids)}
            ),
            "temperature": sampling_params.temperature,
            "top_p": sampling_params.top_p,
            "seed": sampling_params.seed,
            **(
                text(self._tokenizer, "prompt_text", list(prompt_token_ids))
                if trace_prompt is None
                else {}
            ),
        }
        self.sink.emit(RequestEvent(req_id, RequestMark.ARRIVED, self.step_index, now, detail))
        return None

    def abort(self, req_ids: Iterable[str]) -> list[str]:
        """Abort requests (those still live), each with an `aborted` mark at this step.
        Returns the ids aborted."""
        return self._abort(list(req_ids), at_stop=False)

    def stop(self) -> list[str]:
        """The engine is told to stop (its session ends): every request it still holds,
        running or waiting, is aborted (FINISHED_ABORTED), as vLLM's engine core aborts
        them at a stop, each with an `aborted` mark at the last step
        (protocol.lifecycle.stop_marks). Returns the ids aborted."""
        return self._abort(list(self.scheduler.requests), at_stop=True)

    def _abort(self, req_ids: list[str], at_stop: bool) -> list[str]:
        """End the live ones of `req_ids` as FINISHED_ABORTED and emit their marks
        (engine.request_marks.abort_marks)."""
        held = self.scheduler.requests
        details = {r: abort_detail(held[r], at_stop) for r in req_ids if r in held}
        aborted = self.scheduler.finish_requests(req_ids, RequestStatus.FINISHED_ABORTED)
        ended = [(r, details[r]) for r in aborted]
        self._emit_marks(abort_marks(self.step_index, self.now(), ended, at_stop))
        return aborted

    def _emit_marks(self, marks: list[Mark]) -> None:
        emit = self.sink.emit
        for mark in marks:
            emit(RequestEvent(mark.req, mark.kind, mark.step, mark.t, mark.detail))

    def update_config(self, **changes: Any) -> EngineConfig:
        """Change knobs (validated like vLLM); they apply from the next step."""
        new = self.config.with_updates(**changes)
        self.scheduler.update_config(new)
        self.config_version += 1
        self.sink.emit(ConfigEvent(self.step_index, self.config_version, changes, new.as_dict()))
        return new

    def has_unfinished_requests(self) -> bool:
        """Requests not finished, or (async) batches whose output is not applied yet."""
        return self.scheduler.has_unfinished_requests() or bool(self.batch_queue)

    # ---------------------------------------------------------------- step
    def step(self) -> IterationEvent:
        """One engine step: vLLM's `EngineCore.step` (+ `post_step` drafting) when sync,
        `step_with_batch_queue` under async scheduling."""
        if self.scheduler.async_scheduling:
            return self._step_with_batch_queue()
        clock = self.clock
        sched = self.scheduler
        t_start = clock()
        output = sched.schedule(self.step_index)
        t_sched = clock()
        runner_output = self._execute(output)
        t_forward = clock()
        update = sched.update_from_output(output, runner_output)
        if sched.num_spec_tokens and output.total_num_scheduled_tokens:
            self._propose_drafts(update.drafted)
        t_end = clock()
        timing = StepTiming(
            t_start - self.t0,
            t_end - t_start,
            ((t_sched - t_start) + (t_end - t_forward)) * 1e6,
            runner_output.forward_ms,
        )
        return self._finish_step(output, update, output.step, timing)

    def _step_with_batch_queue(self) -> IterationEvent:
        clock = self.clock
        sched = self.scheduler
        queue = self.batch_queue
        t_start = clock()
        forward_s = 0.0
        forward_ms = 0.0
        scheduled: SchedulerOutput | None = None
        if sched.has_requests():
            scheduled = sched.schedule(self.step_index, queue.late_tokens())
            t_forward = clock()
            runner_output = self._execute(scheduled)
            forward_s = clock() - t_forward
            forward_ms = runner_output.forward_ms
            queue.submit(scheduled, runner_output)
            # 0.23+: an empty batch waits too while the scheduler still has requests.
            if not queue.is_full() and (
                scheduled.total_num_scheduled_tokens
                or (sched.features.batch_queue_waits_while_requests and sched.has_requests())
            ):
                # The device is busy with this batch: fill the queue before waiting.
                return self._finish_async(scheduled, None, t_start, forward_s, forward_ms)
        if not queue:
            # Nothing to schedule and nothing in flight: an idle step.
            return self._finish_async(None, None, t_start, forward_s, forward_ms)
        batch = queue.pop_oldest()
        update = sched.update_from_output(batch.output, batch.runner_output)
        return self._finish_async(
            scheduled, (batch.output.step, update), t_start, forward_s, forward_ms
        )

    def _execute(self, output: SchedulerOutput) -> ModelRunnerOutput:
        """The runner's forward pass; simulated, it lasts the modelled time (on a virtual
        clock, or waited out in real time), so the step ends (its tokens exist) that long
        after it started."""
        runner_output = self.runner.execute(output)
        if self._virtual is not None:
            self._virtual.advance(runner_output.forward_ms / 1000.0)
        elif self.pace is not None and runner_output.simulated:
            self.pace(runner_output.forward_ms)
        return runner_output

    def _finish_async(
        self,
        scheduled: SchedulerOutput | None,
        applied: tuple[int, UpdateResult] | None,
        t_start: float,
        forward_s: float,
        forward_ms: float,
    ) -> IterationEvent:
        t_end = self.clock()
        output = scheduled or self.scheduler.idle_output(self.step_index)
        timing = StepTiming(
            t_start - self.t0, t_end - t_start, (t_end - t_start - forward_s) * 1e6, forward_ms
        )
        if applied is None:
            return self._finish_step(output, no_update(), None, timing)
        return self._finish_step(output, applied[1], applied[0], timing)

    def _propose_drafts(self, drafted: list[Request]) -> None:
        """After the update, the drafter proposes for every request of the batch that got
        tokens (vLLM's post_step -> update_draft_token_ids)."""
        if self._drafter is None or not drafted:
            return
        k = self.scheduler.num_spec_tokens
        drafts = self._drafter.propose([(r.request_id, r.token_ids) for r in drafted], k)
        self.scheduler.update_draft_token_ids([r.request_id for r in drafted], drafts)

    def _finish_step(
        self,
        output: SchedulerOutput,
        update: UpdateResult,
        updated_step: int | None,
        timing: StepTiming,
    ) -> IterationEvent:
        arrived, self._arrived = tuple(self._arrived), []
        rejected, self._rejected = tuple(self._rejected), []
        inputs = StepInputs(arrived, rejected, self.runner.simulated, self.config_version)
        sched = self.scheduler
        end = StepEnd(len(sched.running), len(sched.waiting), sched.output_placeholders())
        event = build_iteration_event(
            output,
            update,
            updated_step,
            timing,
            inputs,
            end,
            sched.kv_cache_manager.block_pool,
            sched.config.scheduler,
            self.kv_changes,
        )
        self.sink.emit(event)
        self._emit_marks(
            marks_of_step(event, update.finished, self._first_token_seen, self._tokenizer)
        )
        self.step_index += 1
        return event
