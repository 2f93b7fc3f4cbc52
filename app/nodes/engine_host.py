"""The dashboard's own engine process (`batchscope engine --link-fd N`, spawned and supervised
by `batchscope serve`): a node like any `batchscope engine --push`, speaking the ingest
protocol over a socketpair link (app.nodes.link) instead of a websocket.

Frames are converted on the engine thread and JSON-encoded once, in the outbox
(app.nodes.link_outbox: the credit window of acks); the dashboard only folds and forwards
them. New sessions (a scenario, other knobs, a restart) start here too, each announced on
the same link. A reply follows the frames its command made, sent with them at once (no
wait for acks): it is queued behind at most those few frames (a flat-out engine keeps them
few), so commands answer promptly at any rate.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, replace
from typing import Any

from app.nodes.commands import PAUSED_AFTER, UnknownCommand, error_detail, to_command
from app.nodes.link import Link, LinkClosed
from app.nodes.link_outbox import FrameTap, LinkOutbox
from app.nodes.producer import QueueSink
from app.nodes.scenarios import ScenarioArrivals, load_named_scenario
from app.nodes.trace_workload import TraceWorkload, load_trace_workload
from app.settings import Settings
from engine.config import EngineConfig, knobs_to_reset
from engine.demo_workload import DemoWorkload
from engine.engine import Engine
from engine.engine_core import EngineCore
from engine.faults import SchedulerAssertion
from engine.runner.base import ModelRunner
from engine.scenario import Scenario
from engine.workload import PoissonWorkload
from protocol import control
from protocol.codes import CommandKind, FrameType, MessageType, SessionEvent
from protocol.envelope import encode
from protocol.session import engine_fields, new_session_id, session_meta

log = logging.getLogger("batchscope.engine")

REPLY_AHEAD_MAX = 256
"""A reply goes out with up to this many frames ahead of it, past the window; a paced
engine with more waiting (a dashboard far behind) lets them through the window first."""

RunnerFactory = Callable[[EngineConfig], ModelRunner]


class EngineHost:
    """One engine process: its current session, the link, and the commands it serves."""

    def __init__(
        self,
        link: Link,
        settings: Settings,
        make_runner: RunnerFactory,
        tap: FrameTap | None = None,
    ) -> None:
        self.link = link
        self.out = LinkOutbox(link, tap)
        self.settings = settings
        self.make_runner = make_runner
        self.core: EngineCore | None = None
        self.workload: PoissonWorkload | None = None
        self.demo: DemoWorkload | None = None
        """The demo wave, while it plays (`--workload demo`, the default)."""
        self._req_ids = itertools.count(1)
        self._switching = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------ sessions
    async def start_session(
        self, config: EngineConfig | None = None, scenario: Scenario | None = None
    ) -> str:
        """Stop the current session (its last frames still go out) and start a new one."""
        async with self._switching:
            if self.core is not None:
                await asyncio.to_thread(self.core.stop)
                self.core = None
                await self.out.flush(window=False)
            config = config or (scenario.config if scenario else self.settings.engine_config())
            trace = self.settings.workload_trace() if scenario is None else None
            played: Scenario | TraceWorkload | None = scenario
            if trace:
                played = await asyncio.to_thread(
                    load_trace_workload, trace, config, self.settings.trace_block_tokens
                )
            runner = await asyncio.to_thread(self.make_runner, config)
            session = new_session_id()
            name = played.name if played else "live"
            demo = played is None and self.settings.workload == "demo"
            extra: dict[str, Any] = {"workload": "demo"} if demo else {}
            meta = session_meta(name, "local", **engine_fields(runner, config.as_dict()), **extra)
            self.out.sink = QueueSink()
            engine = Engine(config, runner, self.out.sink)
            self.demo = None
            hook: Callable[[Engine], None]
            if played is not None:
                self.workload = None
                # A trace is read line by line as the clock goes (app.nodes.trace_workload).
                if isinstance(played, Scenario):
                    hook = ScenarioArrivals(played)
                else:
                    hook = played.arrivals()
            elif demo:
                # The Poisson workload stays off (its form shows it so) until turned on.
                self.workload = None
                self.demo = hook = DemoWorkload(next_id=self._next_req_id)
            else:
                self.workload = PoissonWorkload(
                    self.settings.workload_spec(), next_id=self._next_req_id
                )
                hook = self.workload
            self.out.start(session)
            announce = self.out.frames.hello(
                {
                    "meta": meta,
                    "workload": self.workload_spec(),
                    "scenario": played.name if played else None,
                    "tokenizer": _tokenizer_info(runner),
                }
            )
            await self.link.send_text(encode(announce))
            self.out.queue_frame(FrameType.SESSION, {"event": SessionEvent.OPENED, **meta})
            s = self.settings
            # Only a flat-out simulation waits for its frames; anything with a pace of its
            # own (a model on a device, a realtime simulation) drops what cannot go out.
            flat_out = runner.simulated and not s.realtime
            self.core = EngineCore(
                engine,
                realtime=s.realtime,
                speed=s.sim_speed,
                before_step=hook,
                backlog=self.out.backlogged if flat_out else None,
                on_failure=self._failed,
            )
            self.core.start()
            return session

    def _failed(self, fault: SchedulerAssertion) -> None:
        """On the engine thread: the session says where and why its engine stopped."""
        failed = {"event": SessionEvent.FAILED, **fault.as_dict()}
        self.out.sink.queue.put((FrameType.SESSION, failed))
        self.out.sink.queue.put((FrameType.SESSION, {"event": SessionEvent.STATE, "paused": True}))

    def workload_spec(self) -> dict[str, Any] | None:
        """The Poisson workload's spec; while the demo wave plays, the one it would start
        with, off (`demo`: true); None in a scenario."""
        if self.demo is not None:
            return {**asdict(replace(self.settings.workload_spec(), enabled=False)), "demo": True}
        return asdict(self.workload.spec) if self.workload else None

    def _step(self) -> int:
        return self.core.engine.step_index if self.core else 0

    def _next_req_id(self) -> str:
        return f"req-{next(self._req_ids)}"

    # ------------------------------------------------------------ commands
    async def _receive_forever(self) -> None:
        while True:
            msg = json.loads(await self.link.recv())
            kind = msg.get("type")
            handle = DASHBOARD_MESSAGES.get(kind) if isinstance(kind, str) else None
            if handle is not None:
                await handle(self, msg)

    async def _on_ack(self, msg: Mapping[str, Any]) -> None:
        self.out.on_ack(msg)
        # The room an ack makes is used at once: frames the engine made while it waited
        # for it (still on the sink's queue) go too, not at the next tick.
        await self.out.flush()

    async def _on_command(self, msg: Mapping[str, Any]) -> None:
        task = asyncio.create_task(self._answer(msg))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _on_error(self, msg: Mapping[str, Any]) -> None:
        log.warning("dashboard says: %s", msg.get("detail"))

    async def _answer(self, msg: Mapping[str, Any]) -> None:
        try:
            result = await self._command(msg.get("kind"), msg.get("args") or {})
            reply = control.reply_ok(msg.get("id"), result)
        except Exception as exc:
            reply = control.reply_error(msg.get("id"), error_detail(exc))
        with contextlib.suppress(LinkClosed):
            # What the command made (a config frame, a state mark) goes out before its
            # reply: whoever awaited the reply then sees it in the session. They go with
            # it, past the window (no wait for acks): the dashboard folds them before the
            # reply in any case, and a flat-out engine keeps them few (AHEAD_FRAMES).
            self.out.collect()
            if len(self.out.frames) <= REPLY_AHEAD_MAX:
                await self.out.flush(window=False, then=encode(reply))
                return
            await self.out.flush_through(self.out.frames.seq)
            await self.link.send_text(encode(reply))

    async def _command(self, kind: object, args: Mapping[str, Any]) -> Any:
        own = SESSION_COMMANDS.get(kind) if isinstance(kind, str) else None
        if own is not None:
            return await own(self, args)
        if self.core is None:
            raise ValueError("the engine is starting")
        command, result_of = to_command(kind, args, self._next_req_id)
        result = await asyncio.wrap_future(self.core.submit(command))
        if kind in PAUSED_AFTER:
            self.out.sink.queue.put(
                (FrameType.SESSION, {"event": SessionEvent.STATE, "paused": PAUSED_AFTER[kind]})
            )
        return result_of(result)

    async def _set_workload(self, args: Mapping[str, Any]) -> Any:
        if self.demo is not None and self.core is not None:
            # The Poisson workload replaces the demo wave for the rest of the session.
            spec = replace(self.settings.workload_spec(), enabled=False)
            self.workload = PoissonWorkload(spec, next_id=self._next_req_id)
            self.demo = None
            self.core.before_step = self.workload
        if self.workload is None:
            raise ValueError("the live session runs a scenario; the workload is off")
        # The spec is read by the engine thread each step; replacing it is atomic.
        return asdict(self.workload.update(**dict(args["changes"])))

    async def _load_scenario(self, args: Mapping[str, Any]) -> Any:
        try:
            scenario = load_named_scenario(str(args["name"]))
        except KeyError:
            raise UnknownCommand(f"no scenario named {args['name']!r}") from None
        return await self.start_session(scenario=scenario)

    async def _new_session(self, args: Mapping[str, Any]) -> Any:
        base = self.core.engine.config if self.core else self.settings.engine_config()
        changes = dict(args.get("changes") or {})
        if "vllm_version" in changes:  # knobs carried over, not asked for, that the
            # chosen release lacks go back to their defaults; asked-for ones are refused
            changes = {**knobs_to_reset(base, str(changes["vllm_version"])), **changes}
        config = base.with_updates(**changes)
        return await self.start_session(config=config)

    # ----------------------------------------------------------------- run
    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set or the dashboard closes the link (it is gone)."""
        await self.start_session()
        jobs = [
            asyncio.create_task(self.out.send_forever(self._step)),
            asyncio.create_task(self._receive_forever()),
            asyncio.create_task(stop.wait()),
        ]
        try:
            done, _ = await asyncio.wait(jobs, return_when=asyncio.FIRST_COMPLETED)
            for job in done:
                if not job.cancelled() and isinstance(job.exception(), LinkClosed):
                    log.info("the dashboard closed the link; stopping")
        finally:
            for job in jobs:
                job.cancel()
            if self.core is not None:
                await asyncio.to_thread(self.core.stop)
            with contextlib.suppress(LinkClosed):
                await self.out.flush(window=False)
            self.link.close()


DASHBOARD_MESSAGES: dict[str, Callable[[EngineHost, Mapping[str, Any]], Awaitable[None]]] = {
    MessageType.ACK.value: EngineHost._on_ack,
    MessageType.COMMAND.value: EngineHost._on_command,
    MessageType.ERROR.value: EngineHost._on_error,
}
"""The dashboard's messages on the link, by type (others are not for an engine)."""

SESSION_COMMANDS: dict[str, Callable[[EngineHost, Mapping[str, Any]], Awaitable[Any]]] = {
    CommandKind.WORKLOAD.value: EngineHost._set_workload,
    CommandKind.LOAD_SCENARIO.value: EngineHost._load_scenario,
    CommandKind.NEW_SESSION.value: EngineHost._new_session,
}
"""The commands the host answers itself (its session and workload); the rest are the
engine's (app.nodes.commands.COMMANDS)."""


def _tokenizer_info(runner: ModelRunner) -> dict[str, Any]:
    """What the dashboard needs to encode prompt text exactly as this runner would."""
    config = getattr(runner, "model_config", None)
    eos = list(getattr(config, "eos_token_ids", None) or [])
    return {
        "bos_token_id": getattr(config, "bos_token_id", None),
        "eos_token_id": eos[0] if eos else None,
    }
