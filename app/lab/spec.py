"""A sweep as asked for (by the CLI, the lab page, the API or a ready experiment), checked
completely before anything runs: every point's scenario validates, the runner exists and
the cost model loads. Bad input is one SweepError sentence, never a half-run sweep."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

from typing_extensions import TypedDict

from app.lab.scenario_types import BaseScenario, SweepSource
from engine.runner.cost_model import load_cost_model
from engine.sweep import Knob, SweepError, SweepPoint, plan_points, point_scenario
from protocol.wire import KnobValue

RUNNERS = ("sim", "torch")


class KnobRange(TypedDict):
    """A swept knob and its values, as a sweep stores it."""

    name: str
    values: list[KnobValue]


MAX_REPEAT = 50


@dataclass(frozen=True)
class SweepSpec:
    base: BaseScenario
    """The base scenario (with `workload` for a generated one)."""
    knobs: list[Knob]
    repeat: int = 1
    runner: str = "sim"
    cost_model: str | None = None
    name: str = ""
    source: SweepSource = field(default_factory=lambda: SweepSource(kind="", label=""))
    """For people: where the workload came from."""
    experiment: str | None = None

    def points(self) -> list[SweepPoint]:
        """Every point, each validated; raises SweepError naming the first bad one."""
        if self.runner not in RUNNERS:
            raise SweepError(f"runner {self.runner!r}: sim or torch")
        if not 1 <= self.repeat <= MAX_REPEAT:
            raise SweepError(f"repeat: 1 to {MAX_REPEAT}")
        if self.cost_model:
            if self.runner != "sim":
                raise SweepError("a cost model is for the sim runner (torch measures)")
            try:
                load_cost_model(self.cost_model)
            except ValueError as exc:
                raise SweepError(f"cost model: {exc}") from None
        if self.runner == "torch" and importlib.util.find_spec("torch") is None:
            raise SweepError("the torch runner needs torch (pip install torch==2.13.0)")
        points = plan_points(self.knobs, self.repeat)
        for point in points:
            point_scenario(self.base, point)
        return points

    def knob_dicts(self) -> list[KnobRange]:
        return [{"name": k.name, "values": list(k.values)} for k in self.knobs]

    def title(self) -> str:
        return self.name or " × ".join(k.name for k in self.knobs) + " · " + str(
            self.source["label"]
        )
