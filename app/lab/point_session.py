"""A sweep point opened as a session: its scenario run again through simulate, keeping
every event (timed on the runner's clock; no step-by-step result beside them), published
as a closed, recorded session (source `lab`) that the replay, Gantt and /compare read like
any other. The events are held until published: unlike the sweep's runs, opening a point
costs memory in step with its run's length (docs/lab.md says so).

On the SimRunner the run is the point's run exactly (same steps, same figures); on the
torch runner it is a fresh run of the same scenario (its step times are measured again).
"""

from __future__ import annotations

import asyncio

from app.lab.scenario_types import BaseScenario
from app.lab.store import SweepDetail
from app.live.hub import EventHub
from app.records.rerun import publish_closed_session
from engine.config import EngineConfig
from engine.events import Event, ListSink
from engine.scenario import parse_scenario
from engine.simulate import record_scenario
from engine.sweep import SweepPoint, make_point_runner, point_scenario
from protocol.session import session_meta


def point_events(
    base: BaseScenario, point: SweepPoint, runner: str, cost_model: str | None
) -> tuple[EngineConfig, list[Event]]:
    scenario = parse_scenario(point_scenario(base, point))
    # A session is its frames: every event is kept until it is published (memory in step
    # with the run's length, unlike the sweep's own runs, which fold as they go).
    sink = ListSink()
    record_scenario(scenario, make_point_runner(runner, cost_model, scenario.config), sink)
    return scenario.config, sink.events


def point_label(sweep: SweepDetail, point: SweepPoint) -> str:
    knobs = ", ".join(f"{k}={v}" for k, v in point.knobs.items())
    repeat = f" (repeat {point.repeat})" if sweep["repeat"] > 1 else ""
    return f"lab · {sweep['name']}: {knobs}{repeat}"[:200]


async def record_point(hub: EventHub, sweep: SweepDetail, point: SweepPoint) -> str:
    """Run the point off the event loop, publish it as a new closed session; its id."""
    config, events = await asyncio.to_thread(
        point_events, sweep["base"], point, sweep["runner"], sweep["cost_model"]
    )
    meta = session_meta(
        point_label(sweep, point),
        "lab",
        runner=sweep["runner"],
        simulated=sweep["runner"] == "sim",
        config=config.as_dict(),
        lab_sweep=sweep["id"],
        lab_point=point.index,
        knobs=point.knobs,
        cost_model=sweep["cost_model"],
    )
    return publish_closed_session(hub, meta, events)
