"""The scenario library (scenarios/NAME.json, shipped with the package) as the dashboard
offers it, and the hook that plays a scenario's arrivals into a live engine."""

from __future__ import annotations

from collections import deque
from typing import Any

from typing_extensions import TypedDict

from app.resources import asset_path
from engine.engine import Engine
from engine.scenario import Scenario, ScenarioError, load_scenario

SCENARIO_DIR = asset_path("scenarios")


class ScenarioSummary(TypedDict):
    name: str
    title: str
    description: str


def list_scenario_names() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.json"))


def load_named_scenario(name: str) -> Scenario:
    """scenarios/NAME.json; raises KeyError when the library has no such scenario."""
    if name not in list_scenario_names():
        raise KeyError(name)
    return load_scenario(SCENARIO_DIR / f"{name}.json")


def scenario_summaries() -> list[ScenarioSummary]:
    """The scenarios a live session can load (unreadable files are left out)."""
    out: list[ScenarioSummary] = []
    for name in list_scenario_names():
        try:
            sc = load_scenario(SCENARIO_DIR / f"{name}.json")
        except (ScenarioError, OSError):
            continue
        out.append({"name": name, "title": sc.name or name, "description": sc.description})
    return out


class ScenarioArrivals:
    """before_step hook: adds a scenario's requests at their arrival steps, and those with
    `arrival_time_ms` once the engine's clock reaches that time (each keeping the time it
    was due as its arrival time)."""

    def __init__(self, scenario: Scenario) -> None:
        self.by_step: dict[int, list[Any]] = {}
        timed: list[Any] = []
        for req in scenario.requests:
            if req.arrival_time_ms is None:
                self.by_step.setdefault(req.arrival_step, []).append(req)
            else:
                timed.append(req)
        timed.sort(key=lambda r: float(r.arrival_time_ms))
        self.timed: deque[Any] = deque(timed)

    def __call__(self, engine: Engine) -> None:
        for req in self.by_step.pop(engine.step_index, ()):
            engine.add_request(req.id, req.prompt_token_ids, req.sampling_params, req.priority)
        timed = self.timed
        if timed:
            now_ms = engine.now() * 1000.0
            while timed and timed[0].arrival_time_ms <= now_ms:
                req = timed.popleft()
                engine.add_request(
                    req.id,
                    req.prompt_token_ids,
                    req.sampling_params,
                    req.priority,
                    req.arrival_time_ms / 1000.0,
                )
        # Empty steps between arrivals are real steps of the scenario.
        if self.by_step and not engine.has_unfinished_requests():
            engine.step()
