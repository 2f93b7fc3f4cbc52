"""EngineService: owns the local engine thread and its live session; turns web calls into
engine commands and awaits their futures (the engine never waits on the web).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, NamedTuple

from typing_extensions import TypedDict

from app.errors import NotFound
from app.live.bridge import HubSink
from app.live.hub import EventHub
from app.protocol.session import engine_fields, new_session_id, session_meta
from app.resources import asset_path
from app.settings import Settings
from engine.commands import (
    Abort,
    AddRequest,
    AddRequests,
    Command,
    Pause,
    Resume,
    Step,
    UpdateConfig,
)
from engine.config import EngineConfig
from engine.engine import Engine
from engine.engine_core import EngineCore
from engine.request import SamplingParams
from engine.runner import make_runner
from engine.runner.base import ModelRunner
from engine.runner.tokenizer import ByteTokenizer, Tokenizer
from engine.scenario import Scenario, ScenarioError, load_scenario
from engine.workload import PoissonWorkload, WorkloadSpec

SCENARIO_DIR = asset_path("scenarios")
COMMAND_TIMEOUT_S = 30.0


class EngineBusy(RuntimeError):
    pass


class NewRequest(NamedTuple):
    """A request to inject into an engine (local or a node's)."""

    prompt_token_ids: list[int]
    params: SamplingParams
    priority: int = 0


class Admission(NamedTuple):
    """What became of an injected request."""

    req_id: str
    rejected: str | None
    """Why the engine refused it; None: queued."""


class ScenarioArrivals:
    """before_step hook: adds a scenario's requests at their arrival steps."""

    def __init__(self, scenario: Scenario) -> None:
        self.by_step: dict[int, list[Any]] = {}
        for req in scenario.requests:
            self.by_step.setdefault(req.arrival_step, []).append(req)

    def __call__(self, engine: Engine) -> None:
        for req in self.by_step.pop(engine.step_index, ()):
            engine.add_request(
                req.id, list(req.prompt_token_ids), req.sampling_params, req.priority
            )
        # Empty steps between arrivals are real steps of the scenario.
        if self.by_step and not engine.has_unfinished_requests():
            engine.step()


class EngineService:
    def __init__(
        self,
        settings: Settings,
        hub: EventHub,
        runner_factory: Callable[[EngineConfig], ModelRunner] | None = None,
    ) -> None:
        self.settings = settings
        self.hub = hub
        self.runner_factory = runner_factory or self._default_runner
        self.core: EngineCore | None = None
        self.sink: HubSink | None = None
        self.session: str | None = None
        self.workload: PoissonWorkload | None = None
        self.scenario: str | None = None
        self.runner: ModelRunner | None = None
        self._ids = itertools.count(1)

    def _default_runner(self, config: EngineConfig) -> ModelRunner:
        s = self.settings
        if s.runner == "sim":
            return make_runner("sim", config)
        options: dict[str, Any] = {"device": s.device}
        if s.model:
            options["model_dir"] = s.model
        return make_runner("torch", config, **options)

    # ------------------------------------------------------------ sessions
    def start(self, config: EngineConfig | None = None, scenario: Scenario | None = None) -> str:
        """Start a fresh engine thread in a new live session (stopping any current one)."""
        self.stop()
        loop = asyncio.get_running_loop()
        config = config or (scenario.config if scenario else self.settings.engine_config())
        runner = self.runner_factory(config)
        self.runner = runner
        session = new_session_id()
        name = scenario.name if scenario else "live"
        meta = session_meta(name, "local", **engine_fields(runner, config.as_dict()))
        self.hub.open_session(session, meta)
        self.sink = HubSink(self.hub, loop, session)
        engine = Engine(config, runner, self.sink)
        if scenario is not None:
            hook: Callable[[Engine], None] | None = ScenarioArrivals(scenario)
            self.workload = None
        else:
            self.workload = PoissonWorkload(self.settings.workload_spec(), next_id=self.next_req_id)
            hook = self.workload
        self.core = EngineCore(
            engine, realtime=self.settings.realtime, speed=self.settings.sim_speed, before_step=hook
        )
        self.core.start()
        self.session = session
        self.scenario = scenario.name if scenario else None
        return session

    def stop(self) -> None:
        if self.core is not None:
            self.core.stop()
            self.core = None
        if self.sink is not None:
            self.sink.closed = True
        if self.session is not None:
            self.hub.close_session(self.session)
            self.session = None

    def tokenizer(self) -> Tokenizer:
        """The runner's tokenizer (a checkpoint's), else the built-in byte tokenizer."""
        tok: Tokenizer | None = getattr(self.runner, "tokenizer", None)
        return tok if tok is not None else ByteTokenizer()

    def next_req_id(self) -> str:
        return f"req-{next(self._ids)}"

    async def run(self, command: Command) -> Any:
        if self.core is None or not self.core.alive:
            raise EngineBusy("no local engine is running")
        future = self.core.submit(command)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), COMMAND_TIMEOUT_S)
        except TimeoutError:
            raise EngineBusy("the engine did not answer in time") from None

    # ------------------------------------------------------------ commands
    async def add_requests(self, items: list[NewRequest]) -> list[Admission]:
        """A burst in one engine command (one hop, however many requests)."""
        commands = tuple(
            AddRequest(self.next_req_id(), r.prompt_token_ids, r.params, r.priority) for r in items
        )
        reasons = await self.run(AddRequests(commands))
        return [Admission(c.req_id, r) for c, r in zip(commands, reasons, strict=True)]

    async def abort(self, req_id: str) -> list[str]:
        result: list[str] = await self.run(Abort((req_id,)))
        return result

    async def update_config(self, changes: dict[str, Any]) -> dict[str, Any]:
        config: EngineConfig = await self.run(UpdateConfig(changes))
        return config.as_dict()

    async def pause(self) -> None:
        await self.run(Pause())
        self._publish_state(paused=True)

    async def resume(self) -> None:
        await self.run(Resume())
        self._publish_state(paused=False)

    async def step(self) -> None:
        await self.run(Step(1))
        self._publish_state(paused=True)

    def _publish_state(self, **state: Any) -> None:
        if self.session is not None:
            self.hub.publish(self.session, "session", {"event": "state", **state})

    def set_workload(self, **changes: Any) -> WorkloadSpec:
        if self.workload is None:
            raise EngineBusy("the live session runs a scenario; the workload is off")
        # The spec is read by the engine thread each step; replacing it is atomic.
        return self.workload.update(**changes)

    def workload_spec(self) -> dict[str, Any] | None:
        return asdict(self.workload.spec) if self.workload else None

    def load_scenario(self, name: str) -> str:
        """Start a new live session running the scenario `name` (scenarios/NAME.json)."""
        if name not in list_scenario_names():
            raise NotFound(f"no scenario named {name!r}")
        return self.start(scenario=load_scenario(SCENARIO_DIR / f"{name}.json"))


class ScenarioSummary(TypedDict):
    name: str
    title: str
    description: str


def list_scenario_names() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.json"))


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
