"""The lab's ready experiments (app/lab/experiments/NAME.json): a workload, the knob(s)
to sweep, the runner and cost model, a short explanation and the chart to open with.

    {"title", "order", "explanation",
     "source": {"kind": "inline", "scenario": {...}} | {"kind": "library", "name": ...}
             | {"kind": "workload", "spec": "poisson:...", "seed": 0},   (+ "label")
     "set": {knob: value}, "knobs": [{"name", "values"}], "repeat", "runner",
     "cost_model", "chart": {"metric", "metric2", "percentile"}}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import cast

from typing_extensions import TypedDict

from app.errors import NotFound
from app.lab.scenario_types import BaseScenario
from app.lab.sources import library_scenario, workload_spec
from app.lab.spec import KnobRange, SweepSpec
from engine.sweep import Knob
from protocol.wire import Knobs

EXPERIMENT_DIR = Path(__file__).resolve().parent / "experiments"


class Chart(TypedDict, total=False):
    """What the sweep's page plots first: a metric family or figure, a second one, and
    the percentile of a family."""

    metric: str
    metric2: str
    percentile: str


class ExperimentSource(TypedDict, total=False):
    kind: str
    """inline (with `scenario`), library (with `name`) or workload (`spec`, `seed`)."""
    scenario: BaseScenario
    name: str
    spec: str
    seed: int
    label: str


class ExperimentFile(TypedDict, total=False):
    """app/lab/experiments/NAME.json."""

    title: str
    order: int
    explanation: str
    source: ExperimentSource
    set: Knobs
    knobs: list[KnobRange]
    repeat: int
    runner: str
    cost_model: str | None
    chart: Chart


class ExperimentSummary(TypedDict):
    name: str
    title: str
    explanation: str
    knobs: list[KnobRange]
    repeat: int
    runner: str
    cost_model: str | None
    source: str
    """Its workload, in words."""
    chart: Chart


@dataclass(frozen=True)
class Experiment:
    name: str
    title: str
    explanation: str
    chart: Chart
    data: ExperimentFile

    def spec(self) -> SweepSpec:
        """The sweep this experiment runs (resolved now: a library scenario is read)."""
        src = self.data["source"]
        kind = src["kind"]
        base: BaseScenario
        if kind == "inline":
            base = {**src["scenario"]}
        elif kind == "library":
            base = library_scenario(src["name"])
        else:
            base = workload_spec(src["spec"], int(src.get("seed", 0)))
        base["config"] = {**base.get("config", {}), **self.data.get("set", {})}
        return SweepSpec(
            base=base,
            knobs=[Knob(k["name"], tuple(k["values"])) for k in self.data["knobs"]],
            repeat=int(self.data.get("repeat", 1)),
            runner=str(self.data.get("runner", "sim")),
            cost_model=self.data.get("cost_model"),
            name=self.title,
            source={"kind": "experiment", "label": src.get("label", kind)},
            experiment=self.name,
        )

    def summary(self) -> ExperimentSummary:
        knobs = self.data["knobs"]
        return {
            "name": self.name,
            "title": self.title,
            "explanation": self.explanation,
            "knobs": [{"name": k["name"], "values": k["values"]} for k in knobs],
            "repeat": int(self.data.get("repeat", 1)),
            "runner": self.data.get("runner", "sim"),
            "cost_model": self.data.get("cost_model"),
            "source": self.data["source"].get("label", ""),
            "chart": self.chart,
        }


@lru_cache(maxsize=1)
def experiments() -> tuple[Experiment, ...]:
    """Every shipped experiment, in their `order`."""
    out = []
    for path in EXPERIMENT_DIR.glob("*.json"):
        data = cast(ExperimentFile, json.loads(path.read_text(encoding="utf-8")))
        out.append(
            (
                int(data.get("order", 99)),
                Experiment(
                    path.stem, data["title"], data["explanation"], data.get("chart", {}), data
                ),
            )
        )
    return tuple(e for _, e in sorted(out, key=lambda pair: (pair[0], pair[1].name)))


def get_experiment(name: str) -> Experiment:
    for exp in experiments():
        if exp.name == name:
            return exp
    raise NotFound(f"no experiment named {name!r}")
