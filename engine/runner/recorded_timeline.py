"""The recorded timeline a re-run follows: what a recording decided step by step, and on
which clock, read from its `iteration` and `request` frames (protocol.wire).

A re-run with no change must decide exactly as recorded, whatever runner recorded it.
While its plan equals the recording's, it takes from here what decisions depend on
beyond the knobs: which requests arrive before each step (the step's `arrived` list),
when each step starts and how long it takes, the drafts scheduled and accepted per
request under speculative decoding, and the output length of a request that stopped on
EOS or a stop token. After the first step whose plan differs, step times come from a
cost model fitted on the recording's own steps (engine.runner.calibrate), and arrivals
land at their recorded times on that clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.runner.calibrate import StepSample, fit_cost_model
from engine.runner.sim import CostModel

Plan = tuple[tuple[tuple[str, int, int], ...], tuple[str, ...], tuple[str, ...]]
"""One step's decisions: members (req, n, start), preempted ids, finished ids."""

MIN_FIT_STEPS = 4
"""Fewer non-empty recorded steps than this: the SimRunner's default cost model."""


def plan_of(iteration: Mapping[str, Any]) -> Plan:
    """The decisions of one `iteration` frame's data."""
    return (
        tuple((r["req"], int(r["n"]), int(r["start"])) for r in iteration["scheduled"]),
        tuple(p["req"] for p in iteration["preempted"]),
        tuple(f["req"] for f in iteration["finished"]),
    )


@dataclass(frozen=True, slots=True)
class RecordedStep:
    """One recorded step: its plan, its place on the recording's clock, what came in."""

    t_start: float
    duration: float
    forward_ms: float
    plan: Plan
    arrived: tuple[str, ...]
    spec: Mapping[str, int]
    """Drafts scheduled per request (speculative decoding)."""

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n, _ in self.plan[0])

    @property
    def context_tokens(self) -> int:
        return sum(start + n for _, n, start in self.plan[0])


@dataclass(slots=True)
class RecordedTimeline:
    steps: list[RecordedStep] = field(default_factory=list)
    accepted: dict[tuple[int, str], int] = field(default_factory=dict)
    """(the step whose batch was verified, request) -> drafts accepted."""
    stop_lengths: dict[str, int] = field(default_factory=dict)
    """Output length of each request that stopped on EOS or a stop token."""

    # ------------------------------------------------------------ building
    def add_iteration(self, data: Mapping[str, Any]) -> None:
        """Append the step of one `iteration` frame (frames come in step order)."""
        spec = {r["req"]: int(r["spec"]) for r in data["scheduled"] if r.get("spec")}
        self.steps.append(
            RecordedStep(
                float(data["t_start"]),
                float(data["duration"]),
                float(data.get("forward_ms") or 0.0),
                plan_of(data),
                tuple(data.get("arrived") or ()),
                spec,
            )
        )
        verified = data.get("updated_step")
        verified = int(data["step"]) if verified is None else int(verified)
        for req, num in (data.get("accepted") or {}).items():
            self.accepted[(verified, req)] = int(num)

    def add_request_mark(self, data: Mapping[str, Any]) -> None:
        """Note the output length of a request whose `finished` mark says it stopped."""
        detail = data.get("detail") or {}
        if data.get("kind") == "finished" and detail.get("reason") == "stop":
            length = detail.get("num_output_tokens")
            if length:
                self.stop_lengths[str(data["req"])] = int(length)

    # ------------------------------------------------------------- reading
    def __len__(self) -> int:
        return len(self.steps)

    def matches(self, step: int, plan: Plan) -> bool:
        return step < len(self.steps) and self.steps[step].plan == plan

    def drafts_after(self, step: int, req: str) -> int | None:
        """Drafts the recording scheduled for `req` at step `step + 1`; None when it did
        not schedule it then (preempted, say: what was proposed is not recorded)."""
        if step + 1 >= len(self.steps):
            return None
        rec = self.steps[step + 1]
        for member, _, _ in rec.plan[0]:
            if member == req:
                return rec.spec.get(req, 0)
        return None

    def step_ms(self, step: int) -> float:
        """A step's time on the recording's clock: until the next step began (idle
        waits before an arrival excluded: never more than its own duration or forward
        time when the next step started later for another reason)."""
        rec = self.steps[step]
        own = max(rec.duration * 1000.0, rec.forward_ms)
        if step + 1 < len(self.steps):
            gap = (self.steps[step + 1].t_start - rec.t_start) * 1000.0
            if rec.num_tokens and 0.0 < gap <= 2.0 * own:
                return gap
        return own

    def fitted_cost(self) -> CostModel:
        """The SimRunner's cost model fitted on the recording's non-empty steps (its
        default where they are too few or too alike to fit)."""
        samples = [
            StepSample(r.num_tokens, len(r.plan[0]), r.context_tokens, self.step_ms(i))
            for i, r in enumerate(self.steps)
            if r.num_tokens
        ]
        if len(samples) < MIN_FIT_STEPS:
            return CostModel()
        try:
            return fit_cost_model(samples)
        except ValueError:  # steps too alike to separate the terms: the default model
            return CostModel()

    # ---------------------------------------------------------------- wire
    def as_wire(self) -> dict[str, Any]:
        """Plain JSON data (a re-run job crosses a process boundary)."""
        return {
            "steps": [
                [
                    s.t_start,
                    s.duration,
                    s.forward_ms,
                    [list(m) for m in s.plan[0]],
                    list(s.plan[1]),
                    list(s.plan[2]),
                    list(s.arrived),
                    dict(s.spec),
                ]
                for s in self.steps
            ],
            "accepted": [[step, req, n] for (step, req), n in self.accepted.items()],
            "stop_lengths": dict(self.stop_lengths),
        }

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> RecordedTimeline:
        steps = [
            RecordedStep(
                t,
                d,
                f,
                (tuple((m[0], m[1], m[2]) for m in members), tuple(pre), tuple(fin)),
                tuple(arr),
                spec,
            )
            for t, d, f, members, pre, fin, arr, spec in wire["steps"]
        ]
        accepted = {(int(s), str(r)): int(n) for s, r, n in wire.get("accepted", ())}
        return cls(steps, accepted, dict(wire.get("stop_lengths", {})))


def timeline_of(frames: Iterable[tuple[str, Mapping[str, Any]]]) -> RecordedTimeline:
    """The timeline of a recording's frames, (type, data) in seq order."""
    timeline = RecordedTimeline()
    for kind, data in frames:
        if kind == "iteration":
            timeline.add_iteration(data)
        elif kind == "request":
            timeline.add_request_mark(data)
    return timeline
