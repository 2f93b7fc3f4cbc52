"""One trace run under two vLLM releases, recorded as two closed sessions for /compare:
a recording's arrivals re-run under each release (in re-run processes, as any re-run), or
a shipped scenario run under each (in a thread, as a lab point; its name is kept in the
sessions' metadata so the first difference can be explained by running it again)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from sqlalchemy.orm import Session, sessionmaker

from app.db.queries import SessionRow
from app.live.hub import EventHub
from app.records.recorder import Recorder
from app.records.rerun import (
    Arrival,
    KnobChange,
    load_arrivals,
    load_knob_changes,
    publish_closed_session,
    replayed_knob_changes,
)
from app.records.rerun_process import rerun_session
from engine.config import ConfigError, EngineConfig, knobs_to_reset
from engine.events import Event, ListSink
from engine.scenario import Scenario
from engine.simulate import run_scenario
from protocol.session import session_meta


class PairError(ValueError):
    """The trace cannot be run under these releases (the message says why)."""


def as_release(config: EngineConfig, release: str) -> EngineConfig:
    """`config` deciding as `release`; knobs the release lacks are back at their defaults."""
    return config.with_updates(**knobs_to_reset(config, release), vllm_version=release)


def _scenario_events(scenario: Scenario) -> list[Event]:
    sink = ListSink()
    run_scenario(scenario, None, sink)
    return sink.events


async def scenario_pair(
    hub: EventHub, recorder: Recorder | None, name: str, scenario: Scenario, releases: list[str]
) -> list[str]:
    """`scenario` (shipped as `name`) on the sim runner once per release; the session ids."""
    try:
        configs = [as_release(scenario.config, release) for release in releases]
    except ConfigError as exc:
        raise PairError(f"scenario {name!r} cannot run as asked: {exc}") from None
    ids = []
    for config in configs:
        release = config.vllm_version
        events = await asyncio.to_thread(_scenario_events, replace(scenario, config=config))
        meta = session_meta(
            f"{scenario.name or name} · vLLM {release}",
            "rerun",
            runner="sim",
            simulated=True,
            config=config.as_dict(),
            scenario=name,
        )
        ids.append(publish_closed_session(hub, meta, events))
    if recorder is not None:
        await recorder.flush()
    return ids


async def session_pair(
    db: sessionmaker[Session], recorder: Recorder, session_id: str, releases: list[str]
) -> list[str]:
    """Recording `session_id`'s arrivals re-run (sim runner) once per release."""

    def load() -> tuple[SessionRow, list[Arrival], list[KnobChange]]:
        with db() as s:
            return (*load_arrivals(s, session_id), load_knob_changes(s, session_id))

    meta, arrivals, knob_changes = await asyncio.to_thread(load)
    if not arrivals:
        raise PairError("this recording has no re-runnable arrivals")
    recorded = {k: v for k, v in meta["config"].items() if k != "vllm_version"}
    try:
        base = EngineConfig().with_updates(**recorded)
        configs = [as_release(base, release) for release in releases]
        replayed = [replayed_knob_changes(c, knob_changes, ["vllm_version"]) for c in configs]
    except ConfigError as exc:
        raise PairError(f"the recorded knobs cannot be re-run: {exc}") from None
    ids = []
    for config, knobs in zip(configs, replayed, strict=True):
        release = config.vllm_version
        name = f"{meta['name'] or session_id} · vLLM {release}"[:200]
        changes = {"vllm_version": release}
        new_id, _, _ = await rerun_session(
            recorder, meta, arrivals, config, changes, "sim", name, knobs
        )
        ids.append(new_id)
    await recorder.flush()
    return ids
