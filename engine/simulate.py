"""Run a scenario step by step through the Engine and collect a comparable result."""

from __future__ import annotations

import time
from collections import defaultdict, deque
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, TextIO

from engine.engine import Engine
from engine.events import Event, EventSink, ListSink
from engine.faults import SchedulerAssertion, failure_text, stopped_text
from engine.gc_clock import GcClock
from engine.releases import ReleaseFeatures
from engine.result_fold import RequestRecord, ResultFold, StepRecord
from engine.result_json import ResultJson
from engine.run_aggregate import RunAggregate
from engine.runner.base import ModelRunner
from engine.runner.sim import SimRunner
from engine.scenario import Scenario, ScenarioRequest
from engine.virtual_clock import VirtualClock


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
    arrived or still held).

    The whole result is held in memory; `stream_scenario` writes the same result out as
    the run goes."""
    steps: list[StepRecord] = []
    records: dict[str, RequestRecord] = {}
    fold = ResultFold(steps.append, records.__setitem__)
    summary = _run_folded(scenario, fold, runner, sink, features, time_limit_s)
    requests = {r.id: records[r.id] for r in scenario.requests}
    return {"scenario": scenario.name, **summary, "steps": steps, "requests": requests}


def stream_scenario(
    scenario: Scenario,
    out: TextIO | None,
    runner: ModelRunner | None = None,
    time_limit_s: float | None = None,
    on_step: Callable[[StepRecord], None] | None = None,
) -> dict[str, Any]:
    """run_scenario's result written to `out` (None: not written) as the run goes, one
    JSON object of the same keys and values (engine.result_json), so memory stays what
    the engine holds however long the run. `on_step` also gets each step's record (e.g.
    to print it). Returns the result without its `steps` and `requests`."""
    writer = ResultJson(out, scenario.name) if out is not None else None

    def step(record: StepRecord) -> None:
        if writer is not None:
            writer.step(record)
        if on_step is not None:
            on_step(record)

    with writer or nullcontext():
        fold = ResultFold(step, writer.request if writer else lambda _id, _rec: None)
        summary = _run_folded(scenario, fold, runner, None, None, time_limit_s)
        if writer is not None:
            writer.close(summary)
    return {"scenario": scenario.name, **summary}


def record_scenario(
    scenario: Scenario,
    runner: ModelRunner | None,
    sink: EventSink,
    features: ReleaseFeatures | None = None,
) -> dict[str, Any]:
    """The run of run_scenario with its events (timed on the runner's clock) into `sink`
    only, no step-by-step result built beside them: for a caller that keeps the events
    (a lab point opened as a session). Returns `complete`, `stopped` and `failure`."""
    clock = VirtualClock()
    engine = Engine(scenario.config, runner or SimRunner(), sink, features=features, clock=clock)
    outcome = drive(scenario, engine, clock, True, None, lambda _r, _s: None, lambda _s, _m: None)
    summary: dict[str, Any] = {}
    outcome.apply_to(summary)
    return summary


def _run_folded(
    scenario: Scenario,
    fold: ResultFold,
    runner: ModelRunner | None,
    sink: ListSink | None,
    features: ReleaseFeatures | None,
    time_limit_s: float | None,
) -> dict[str, Any]:
    """Drives the run with its events into `fold` (and `sink`); returns the totals and
    how the run ended."""
    clock = VirtualClock()
    options: dict[str, Any] = {}
    if sink is not None:
        # Each step starts at clock_ms; the engine advances it by the step's runner time.
        options["clock"] = clock
    tee = fold if sink is None else _Tee(fold, sink)
    engine = Engine(scenario.config, runner or SimRunner(), tee, features=features, **options)
    outcome = drive(
        scenario, engine, clock, sink is not None, time_limit_s, fold.arrived, fold.idle
    )
    summary = fold.close(scenario.requests)
    outcome.apply_to(summary)
    return summary


class _Tee:
    """Each event to the fold and to the caller's sink."""

    def __init__(self, fold: ResultFold, sink: ListSink) -> None:
        self.fold = fold
        self.sink = sink

    def emit(self, event: Event) -> None:
        self.fold.emit(event)
        self.sink.emit(event)


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
    # No KV map reads a metrics run's events: the pool's block changes are not listed.
    engine = Engine(
        scenario.config, runner or SimRunner(), fold, features=features, kv_changes=False
    )

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
    # Collections on a clock: a long run's queue is not walked every few steps.
    gc_clock = GcClock()
    try:
        while engine.step_index < scenario.max_steps:
            gc_clock.tick()
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
    finally:
        gc_clock.stop()
    not_arrived = len(timed) + sum(len(v) for s, v in arrivals.items() if s > added_step)
    if stop_reason == "max_steps" and not not_arrived and not engine.has_unfinished_requests():
        stop_reason = None  # the cap came with the last step: nothing was cut short
    unfinished = not_arrived + len(engine.scheduler.requests)
    return Outcome(stop_reason, engine.step_index, unfinished, failure)


def format_table(result: dict[str, Any]) -> str:
    """The seed-style table: one line per step, then the totals."""
    lines = [TABLE_HEADER, *(table_line(s) for s in result["steps"]), table_footer(result)]
    return "\n".join(lines)


TABLE_HEADER = (
    f"{'step':>4}  {'scheduled {req: tokens}':<34} {'tok':>4} {'run':>4} {'wait':>4} "
    f"{'kv':>5}  events"
)


def table_line(s: StepRecord) -> str:
    """One step's line of the seed-style table."""
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
    return (
        f"{s['step']:>4}  {plan:<34} {sum(s['scheduled'].values()):>4} "
        f"{s['num_running']:>4} {s['num_waiting']:>4} {s['kv_blocks_used']:>5}  " + "; ".join(notes)
    )


def table_footer(result: dict[str, Any]) -> str:
    """The table's totals (and how the run stopped, if it did), from a result with or
    without its steps."""
    lines = [
        f"total scheduled tokens: {result['total_scheduled_tokens']}  "
        f"steps: {result['num_steps']}  preemptions: {result['total_preemptions']}  "
        f"completed: {result['completed']}"
    ]
    failure = result.get("failure")
    if failure:
        lines.append(failure_text(failure))
    if result.get("stopped"):
        lines.append(stopped_text(result["stopped"]))
    return "\n".join(lines)
