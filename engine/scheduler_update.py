"""What a step does to its requests: progress when the plan is made, then the runner's
sampled tokens (drafts verified, stops applied) when its output arrives (vLLM's
`_update_after_schedule` and `update_from_output`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from engine.outputs import ModelRunnerOutput, SchedulerOutput, UpdateResult
from engine.request import Request, RequestStatus
from engine.stop import check_stop

if TYPE_CHECKING:
    from engine.scheduler import Scheduler
    from engine.scheduler_plan import StepPlan


def update_after_schedule(sched: Scheduler, plan: StepPlan) -> None:
    """Advance the scheduled requests' progress (the plan was built from the old one)."""
    # NOTE: progress advances when the plan is made, before the forward pass, so a
    # prefill can be scheduled again at once; rejected drafts are rolled back later.
    requests = sched.requests
    async_scheduling = sched.async_scheduling
    track_in_flight = sched.track_in_flight
    spec = plan.spec_token_ids
    for req_id, n in plan.num_scheduled_tokens.items():
        request = requests[req_id]
        request.num_computed_tokens += n
        if track_in_flight:
            request.num_in_flight_tokens += n
        request.is_prefill_chunk = is_chunk = request.num_computed_tokens < (
            len(request.token_ids) + request.num_output_placeholders
        )
        if async_scheduling and not is_chunk:
            # The batch will produce one token (plus accepted drafts) per request.
            request.num_output_placeholders += 1 + len(spec.get(req_id, ()))


def apply_output(
    sched: Scheduler, output: SchedulerOutput, runner_output: ModelRunnerOutput
) -> UpdateResult:
    """Append sampled tokens (verifying drafts) and apply stops."""
    result = UpdateResult([], [], {}, {}, [])
    stopped_running: set[Request] = set()
    stopped_waiting: list[Request] = []
    requests = sched.requests
    sampled_token_ids = runner_output.sampled_token_ids
    async_scheduling = sched.async_scheduling
    track_in_flight = sched.track_in_flight
    cache_after_output = sched.cache_after_output
    for chunk in output.chunks:
        req_id = chunk.req_id
        request = requests.get(req_id)
        stale = False
        if track_in_flight and request is not None:
            request.num_in_flight_tokens -= chunk.num_tokens
            if request.num_stale_output_tokens > 0:
                # 0.27+: the batch was in flight when the request was preempted.
                stale = True
                request.num_stale_output_tokens -= chunk.num_tokens
        generated = sampled_token_ids.get(req_id)
        if not generated:
            continue
        if request is None or request.is_finished():
            # Finished (aborted) while the batch was in flight.
            continue
        if chunk.spec_token_ids:
            _apply_verification(
                request, len(chunk.spec_token_ids), generated, result, rollback=not stale
            )
        status_before = request.status
        num_appended, stopped = _append_output(request, generated, sched.max_model_len)
        if stopped and sched.stop_rolls_back and not stale:
            # 0.33: positions past the stop were never really computed.
            request.num_computed_tokens -= len(generated) - num_appended
        if async_scheduling and not stale:
            request.num_output_placeholders -= num_appended
            assert request.num_output_placeholders >= 0
        # Cache the blocks the output completed; not for a request preempted while
        # its batch was in flight (its blocks are gone).
        if cache_after_output and status_before == RequestStatus.RUNNING and not stale:
            in_flight = (
                request.num_in_flight_tokens if track_in_flight else request.num_output_placeholders
            )
            sched.kv_cache_manager.cache_blocks(request, request.num_computed_tokens - in_flight)
        result.sampled_req_ids.append(req_id)
        result.appended_tokens[req_id] = num_appended
        result.drafted.append(request)
        if stopped:
            result.finished.append(request)
            sched.free_request(request)
            if status_before == RequestStatus.RUNNING:
                stopped_running.add(request)
            else:
                stopped_waiting.append(request)
                sched.deferred_waiting.discard(request)
    if stopped_running:
        sched.running = [r for r in sched.running if r not in stopped_running]
    if stopped_waiting:
        sched.waiting.remove_requests(stopped_waiting)
    return result


def _apply_verification(
    request: Request,
    num_draft: int,
    generated: Sequence[int],
    result: UpdateResult,
    rollback: bool = True,
) -> None:
    """Rejected drafts were counted as computed: roll them back (not for stale output:
    its counts predate the preemption's reset)."""
    num_accepted = len(generated) - 1
    num_rejected = num_draft - num_accepted
    if rollback and request.num_computed_tokens > 0:
        request.num_computed_tokens -= num_rejected
    if rollback and request.num_output_placeholders > 0:
        request.num_output_placeholders -= num_rejected
    request.num_draft_tokens += num_draft
    request.num_accepted_tokens += num_accepted
    result.accepted_tokens[request.request_id] = num_accepted


def _append_output(
    request: Request, generated: Sequence[int], max_model_len: int
) -> tuple[int, bool]:
    """Append tokens one by one; tokens past a stop are trimmed. Returns (appended,
    stopped)."""
    for num, token_id in enumerate(generated, 1):
        request.append_output_token_id(token_id)
        if check_stop(request, token_id, max_model_len):
            return num, True
    return len(generated), False


def update_draft_token_ids(
    sched: Scheduler, req_ids: Iterable[str], draft_token_ids: Iterable[list[int]]
) -> None:
    """Take the drafter's proposals (vLLM's update_draft_token_ids)."""
    requests = sched.requests
    for req_id, drafts in zip(req_ids, draft_token_ids, strict=True):
        request = requests.get(req_id)
        if request is None or request.is_finished():
            continue
        if request.is_prefill_chunk:
            # Drafts are ignored for a request still in a prefill chunk.
            request.spec_token_ids = []
            continue
        request.spec_token_ids = drafts
