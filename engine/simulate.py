"""Run a scenario step by step through the Engine and collect a comparable result."""

from __future__ import annotations

import statistics
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

from engine.engine import Engine
from engine.events import IterationEvent, ListSink, RequestEvent
from engine.faults import SchedulerAssertion, failure_text, stopped_text
from engine.releases import ReleaseFeatures
from engine.run_aggregate import RunAggregate
from engine.runner.base import ModelRunner
from engine.runner.sim import SimRunner
from engine.scenario import Scenario, ScenarioRequest
from engine.virtual_clock import VirtualClock
from protocol.codes import RequestMark


def run_scenario(
    scenario: Scenario,
    runner: ModelRunner | None = None,
    sink: ListSink | None = None,
    features: ReleaseFeatures | None = None,
    time_limit_s: float | None = None,
) -> dict[str, Any]:
    """Requests arriving at step s are added, in list order, before step s's schedule;
    requests with `arrival_time_ms` before the first step starting at or after that time
    on the runner's clock (an idle engine jumps to the next such arrival).

    With `sink` (to keep the events, e.g. to record the run as a session), the events
    are timed on the runner's clock too (seconds of summed step time, idle jumps
    included) instead of the wall clock. `features`: the release's, some changes reverted
    (engine.releases.features_reverting).

    Where vLLM's scheduler would fail an assertion (engine.faults), the run stops at that
    step as vLLM's engine does, and the result's `failure` names the assertion and step.

    `complete` says whether every request ran to its end (finished or rejected). A run
    stopped early (the scenario's `max_steps`, `time_limit_s` of wall time, a failure)
    is never complete: `stopped` gives {reason, at_step, unfinished} (requests not yet
    arrived or still held)."""
    clock = VirtualClock()
    options: dict[str, Any] = {}
    if sink is not None:
        # Each step starts at clock_ms; the engine advances it by the step's runner time.
        options["clock"] = clock
    sink = sink or ListSink()
    engine = Engine(scenario.config, runner or SimRunner(), sink, features=features, **options)
    idle: dict[int, float] = {}
    arrived_at: dict[str, tuple[int, float]] = {}

    def on_arrival(req: ScenarioRequest, step: int) -> None:
        if req.arrival_time_ms is not None:
            arrived_at[req.id] = (step, req.arrival_time_ms)

    def on_idle(step: int, ms: float) -> None:
        idle[step] = ms

    outcome = drive(scenario, engine, clock, "clock" in options, time_limit_s, on_arrival, on_idle)
    result = build_result(scenario, sink)
    outcome.apply_to(result)
    for rec in result["steps"]:
        if rec["step"] in idle:
            rec["idle_ms"] = idle[rec["step"]]
    for req_id, (step, at_ms) in arrived_at.items():
        result["requests"][req_id]["arrival_step"] = step
        result["requests"][req_id]["arrival_ms"] = at_ms
    return result


def run_scenario_metrics(
    scenario: Scenario,
    runner: ModelRunner | None = None,
    features: ReleaseFeatures | None = None,
    time_limit_s: float | None = None,
) -> dict[str, Any]:
    """run_scenario's figures (engine.run_metrics) without its step-by-step result: the
    events are folded as they come (engine.run_aggregate), so memory stays what the
    engine holds however long the run. Returns {scenario, metrics, finish_reasons,
    complete} and `stopped` / `failure` as run_scenario gives them."""
    fold = RunAggregate()
    engine = Engine(scenario.config, runner or SimRunner(), fold, features=features)

    def on_arrival(req: ScenarioRequest, step: int) -> None:
        fold.arrived(req.id, len(req.prompt_token_ids), step, req.arrival_time_ms)

    outcome = drive(
        scenario, engine, VirtualClock(), False, time_limit_s, on_arrival,
        lambda _step, ms: fold.idle(ms),
    )  # fmt: skip
    cache = scenario.config.cache
    result: dict[str, Any] = {
        "scenario": scenario.name,
        "metrics": fold.metrics(cache.kv_block_limit or cache.num_usable_blocks),
        "finish_reasons": fold.summary(),
    }
    outcome.apply_to(result)
    return result


class Outcome:
    """How a run ended: `stop_reason` None when every request ran to its end."""

    __slots__ = ("at_step", "failure", "stop_reason", "unfinished")

    def __init__(
        self,
        stop_reason: str | None,
        at_step: int,
        unfinished: int,
        failure: dict[str, int | str] | None,
    ) -> None:
        self.stop_reason = stop_reason
        self.at_step = at_step
        self.unfinished = unfinished
        self.failure = failure

    def apply_to(self, result: dict[str, Any]) -> None:
        """`failure`, `complete` and `stopped` into a run's result."""
        if self.failure is not None:
            result["failure"] = self.failure
        result["complete"] = self.stop_reason is None
        if self.stop_reason is not None:
            result["stopped"] = {
                "reason": self.stop_reason,
                "at_step": self.at_step,
                "unfinished": self.unfinished,
            }


def drive(
    scenario: Scenario,
    engine: Engine,
    clock: VirtualClock,
    timed_marks: bool,
    time_limit_s: float | None,
    on_arrival: Callable[[ScenarioRequest, int], None],
    on_idle: Callable[[int, float], None],
) -> Outcome:
    """The run's loop (see run_scenario): arrivals added when due, idle gaps jumped (each
    told to `on_idle(step, ms)` just before the step after it), steps until every request
    ended, the step cap, the time limit or a scheduler failure. `timed_marks`: arrival
    marks keep the time a request was due (the engine runs on `clock`)."""
    clock_ms = 0.0
    arrivals: dict[int, list[ScenarioRequest]] = defaultdict(list)
    timed: deque[ScenarioRequest] = deque(
        sorted(
            (r for r in scenario.requests if r.arrival_time_ms is not None),
            key=lambda r: r.arrival_time_ms or 0.0,
        )
    )
    for req in scenario.requests:
        if req.arrival_time_ms is None:
            arrivals[req.arrival_step].append(req)
    last_arrival = max(arrivals, default=-1)
    idle_ms = 0.0
    added_step = -1
    failure: dict[str, int | str] | None = None
    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
    stop_reason: str | None = "max_steps"
    while engine.step_index < scenario.max_steps:
        if deadline is not None and time.monotonic() > deadline:
            stop_reason = "time_limit"
            break
        clock.now = clock_ms / 1000.0
        step = engine.step_index
        due = list(arrivals.get(step, ())) if step != added_step else []
        added_step = step
        while timed and (timed[0].arrival_time_ms or 0.0) <= clock_ms:
            due.append(timed.popleft())
        for req in due:
            on_arrival(req, step)
            # On the runner's clock a request keeps the time it was due.
            at_s = None
            if req.arrival_time_ms is not None and timed_marks:
                at_s = req.arrival_time_ms / 1000.0
            engine.add_request(
                req.id, req.prompt_token_ids, req.sampling_params, req.priority, at_s
            )
        if not engine.has_unfinished_requests() and step >= last_arrival:
            if not timed:
                stop_reason = None
                break
            # Idle until the next timed arrival: jump the clock instead of empty steps.
            gap = (timed[0].arrival_time_ms or 0.0) - clock_ms
            clock_ms += gap
            idle_ms += gap
            continue
        if idle_ms:
            on_idle(step, idle_ms)  # the gap before this step (told before it runs)
            idle_ms = 0.0
        try:
            event = engine.step()
        except SchedulerAssertion as fault:
            # vLLM's engine stops at this step: so does the run, and its result says why.
            failure = fault.as_dict()
            stop_reason = "failure"
            break
        clock_ms += event.forward_ms
    not_arrived = len(timed) + sum(len(v) for s, v in arrivals.items() if s > added_step)
    if stop_reason == "max_steps" and not not_arrived and not engine.has_unfinished_requests():
        stop_reason = None  # the cap came with the last step: nothing was cut short
    unfinished = not_arrived + len(engine.scheduler.requests)
    return Outcome(stop_reason, engine.step_index, unfinished, failure)


def build_result(scenario: Scenario, sink: ListSink) -> dict[str, Any]:
    iterations = sink.iterations()
    steps = [_step_record(ev) for ev in iterations]
    requests = {r.id: empty_request_record(r) for r in scenario.requests}
    for ev in sink.request_events():
        _apply_request_event(requests[ev.req_id], ev)
    for it in iterations:
        for chunk in it.chunks:
            rec = requests[chunk.req_id]
            if chunk.is_new and rec["prefix_cache_hit_tokens_first_admission"] is None:
                rec["prefix_cache_hit_tokens_first_admission"] = chunk.num_prefix_hit_tokens
    _count_drafts(steps, requests)
    overheads = sorted(ev.overhead_us for ev in iterations)
    return {
        "scenario": scenario.name,
        "num_steps": len(steps),
        "total_draft_tokens": sum(r["num_draft_tokens"] for r in requests.values()),
        "total_accepted_tokens": sum(r["num_accepted_tokens"] for r in requests.values()),
        "total_scheduled_tokens": sum(ev.num_scheduled_tokens for ev in iterations),
        "total_padding_tokens": sum(ev.num_padding_tokens for ev in iterations),
        "total_preemptions": sum(len(ev.preempted) for ev in iterations),
        "tokens_recomputed": sum(p.tokens_lost for ev in iterations for p in ev.preempted),
        "completed": sum(1 for r in requests.values() if r["finish_reason"] in ("stop", "length")),
        "steps": steps,
        "requests": requests,
        "timing": step_timing(overheads),
    }


def step_timing(overheads_us: list[float]) -> dict[str, float]:
    """Median and p90 of per-step scheduler time (sorted input, microseconds)."""
    if not overheads_us:
        return {"median_step_us": 0.0, "p90_step_us": 0.0}
    return {
        "median_step_us": round(statistics.median(overheads_us), 2),
        "p90_step_us": round(overheads_us[int(0.9 * (len(overheads_us) - 1))], 2),
    }


def empty_request_record(r: ScenarioRequest) -> dict[str, Any]:
    """A scenario request's entry of the result, before anything happened to it."""
    return {
        "arrival_step": r.arrival_step,
        "num_prompt_tokens": len(r.prompt_token_ids),
        "max_tokens": r.sampling_params.max_tokens,
        "priority": r.priority,
        "first_scheduled_step": None,
        "first_token_step": None,
        "finish_step": None,
        "finish_reason": None,
        "num_preemptions": 0,
        "num_output_tokens": 0,
        "prefix_cache_hit_tokens_first_admission": None,
        "output_token_ids": [],
        "num_draft_tokens": 0,
        "num_accepted_tokens": 0,
    }


def _count_drafts(steps: list[dict[str, Any]], requests: dict[str, dict[str, Any]]) -> None:
    """Drafts count when their batch's output verifies them (vLLM's spec-decode stats)."""
    scheduled_spec = {s["step"]: s["scheduled_spec_tokens"] for s in steps}
    for s in steps:
        if not s["accepted_tokens"]:
            continue
        drafts = scheduled_spec.get(s["updated_step"], {})
        for req_id, accepted in s["accepted_tokens"].items():
            rec = requests[req_id]
            rec["num_draft_tokens"] += drafts.get(req_id, 0)
            rec["num_accepted_tokens"] += accepted


def _step_record(ev: IterationEvent) -> dict[str, Any]:
    return {
        "step": ev.step,
        "arrived": list(ev.arrived),
        "scheduled": {c.req_id: c.num_tokens for c in ev.chunks},
        "new_req_ids": list(ev.new_req_ids),
        "resumed_req_ids": list(ev.resumed_req_ids),
        "preempted_req_ids": [p.req_id for p in ev.preempted],
        "prefix_cache_hit_tokens": {
            c.req_id: c.num_prefix_hit_tokens for c in ev.chunks if c.is_new
        },
        "num_running": ev.num_running,
        "num_waiting": ev.num_waiting,
        "kv_blocks_used": ev.kv.used,
        "sampled_req_ids": list(ev.sampled_req_ids),
        "finished_req_ids": [f.req_id for f in ev.finished],
        "num_running_end": ev.num_running_end,
        "num_waiting_end": ev.num_waiting_end,
        "kv_blocks_used_end": ev.kv_blocks_used_end,
        "waiting_reasons": dict(ev.waiting_reasons),
        "updated_step": ev.updated_step,
        "scheduled_spec_tokens": {
            c.req_id: len(c.spec_token_ids) for c in ev.chunks if c.spec_token_ids
        },
        "accepted_tokens": dict(ev.accepted_tokens),
        "appended_tokens": dict(ev.appended_tokens),
        "num_padding_tokens": ev.num_padding_tokens,
        "forward_ms": ev.forward_ms,
    }


def _apply_request_event(rec: dict[str, Any], ev: RequestEvent) -> None:
    if ev.kind == RequestMark.SCHEDULED and rec["first_scheduled_step"] is None:
        rec["first_scheduled_step"] = ev.step
    elif ev.kind == RequestMark.FIRST_TOKEN and rec["first_token_step"] is None:
        rec["first_token_step"] = ev.step
    elif ev.kind == RequestMark.PREEMPTED:
        rec["num_preemptions"] += 1
    elif ev.kind == RequestMark.FINISHED:
        rec["finish_step"] = ev.step
        rec["finish_reason"] = ev.detail["reason"]
        rec["num_output_tokens"] = ev.detail["num_output_tokens"]
        rec["output_token_ids"] = list(ev.detail["output_token_ids"])
    elif ev.kind in (RequestMark.REJECTED, RequestMark.ABORTED):
        rec["finish_step"] = ev.step
        rec["finish_reason"] = "rejected" if ev.kind == RequestMark.REJECTED else "abort"
        if ev.kind == RequestMark.REJECTED:
            rec["reject_reason"] = ev.detail["reason"]


def format_table(result: dict[str, Any]) -> str:
    """The seed-style table: one line per step, then the totals."""
    lines = [
        f"{'step':>4}  {'scheduled {req: tokens}':<34} {'tok':>4} {'run':>4} {'wait':>4} "
        f"{'kv':>5}  events"
    ]
    for s in result["steps"]:
        plan = "{" + ", ".join(f"{k}:{v}" for k, v in s["scheduled"].items()) + "}"
        notes = []
        if s["arrived"]:
            notes.append("arrived " + ",".join(s["arrived"]))
        if s["preempted_req_ids"]:
            notes.append("preempted " + ",".join(s["preempted_req_ids"]))
        if s["finished_req_ids"]:
            notes.append("finished " + ",".join(s["finished_req_ids"]))
        hits = {k: v for k, v in s["prefix_cache_hit_tokens"].items() if v}
        if hits:
            notes.append("prefix hit " + ",".join(f"{k}:{v}" for k, v in hits.items()))
        lines.append(
            f"{s['step']:>4}  {plan:<34} {sum(s['scheduled'].values()):>4} "
            f"{s['num_running']:>4} {s['num_waiting']:>4} {s['kv_blocks_used']:>5}  "
            + "; ".join(notes)
        )
    lines.append(
        f"total scheduled tokens: {result['total_scheduled_tokens']}  "
        f"steps: {result['num_steps']}  preemptions: {result['total_preemptions']}  "
        f"completed: {result['completed']}"
    )
    failure = result.get("failure")
    if failure:
        lines.append(failure_text(failure))
    if result.get("stopped"):
        lines.append(stopped_text(result["stopped"]))
    return "\n".join(lines)
