"""The dashboard's own engine process (`batchscope engine --link-fd N`, spawned and supervised
by `batchscope serve`): a node like any `batchscope engine --push`, speaking the ingest
protocol over a socketpair link (app.nodes.link) instead of a websocket.

Frames are converted on the engine thread and JSON-encoded once, here; the dashboard only
folds and forwards them. New sessions (a scenario, other knobs, a restart) start here too,
each announced on the same link. The engine never waits on the link: frames the dashboard
does not take in time are dropped and counted, and the jump in seq is its visible gap.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from app.nodes.commands import PAUSED_AFTER, UnknownCommand, error_detail, to_command
from app.nodes.link import Link, LinkClosed
from app.nodes.producer import QueueSink
from app.nodes.scenarios import ScenarioArrivals, load_named_scenario
from app.protocol.envelope import encode, envelope
from app.protocol.session import engine_fields, new_session_id, session_meta
from app.settings import Settings
from engine.config import EngineConfig
from engine.engine import Engine
from engine.engine_core import EngineCore
from engine.runner.base import ModelRunner
from engine.scenario import Scenario
from engine.workload import PoissonWorkload

log = logging.getLogger("batchscope.engine")

SEND_INTERVAL_S = 0.01
STATS_INTERVAL_S = 0.25
BACKLOG_FRAMES = 64
MAX_OUTBOX = 50_000
"""Frames waiting for the link; past it new frames are dropped (a gap the dashboard marks)."""
NODE = "local"

RunnerFactory = Callable[[EngineConfig], ModelRunner]


class EngineHost:
    """One engine process: its current session, the link, and the commands it serves."""

    def __init__(self, link: Link, settings: Settings, make_runner: RunnerFactory) -> None:
        self.link = link
        self.settings = settings
        self.make_runner = make_runner
        self.session: str | None = None
        self.core: EngineCore | None = None
        self.sink = QueueSink()
        self.workload: PoissonWorkload | None = None
        self.seq = 0
        self.dropped = 0
        self.outbox: list[str] = []
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
                await self.flush()
            config = config or (scenario.config if scenario else self.settings.engine_config())
            runner = await asyncio.to_thread(self.make_runner, config)
            session = new_session_id()
            name = scenario.name if scenario else "live"
            meta = session_meta(name, "local", **engine_fields(runner, config.as_dict()))
            self.sink = QueueSink()
            engine = Engine(config, runner, self.sink)
            if scenario is not None:
                self.workload = None
                hook: Callable[[Engine], None] = ScenarioArrivals(scenario)
            else:
                self.workload = PoissonWorkload(
                    self.settings.workload_spec(), next_id=self._next_req_id
                )
                hook = self.workload
            self.session, self.seq, self.dropped = session, 0, 0
            announce = {
                "type": "announce",
                "session": session,
                "node": NODE,
                "meta": meta,
                "workload": self.workload_spec(),
                "scenario": scenario.name if scenario else None,
                "tokenizer": _tokenizer_info(runner),
            }
            await self.link.send_text(encode(announce))
            self._queue_frame("session", {"event": "opened", **meta})
            s = self.settings
            # Only a flat-out simulation waits for its frames; anything with a pace of its
            # own (a model on a device, a realtime simulation) drops what cannot go out.
            flat_out = runner.simulated and not s.realtime
            self.core = EngineCore(
                engine,
                realtime=s.realtime,
                speed=s.sim_speed,
                before_step=hook,
                backlog=self._backlogged if flat_out else None,
            )
            self.core.start()
            return session

    def _backlogged(self) -> bool:
        """(Engine thread) frames are waiting for the link beyond a few steps' worth."""
        return self.sink.queue.qsize() + len(self.outbox) > BACKLOG_FRAMES or self.link.busy()

    def workload_spec(self) -> dict[str, Any] | None:
        return asdict(self.workload.spec) if self.workload else None

    def _next_req_id(self) -> str:
        return f"req-{next(self._req_ids)}"

    # -------------------------------------------------------------- frames
    def _queue_frame(self, frame_type: str, data: dict[str, Any]) -> None:
        self.seq += 1
        if len(self.outbox) >= MAX_OUTBOX:
            self.dropped += 1  # the dashboard sees the seq jump and marks the gap
            return
        self.outbox.append(envelope(frame_type, self.session, self.seq, encode(data)))

    def _collect(self) -> None:
        for frame_type, data in self.sink.drain():
            self._queue_frame(frame_type, data)

    async def flush(self) -> None:
        self._collect()
        if self.outbox:
            batch, self.outbox = self.outbox, []
            await self.link.send_lines(batch)

    async def _send_forever(self) -> None:
        last_stats = 0.0
        while True:
            await self.flush()
            now = time.monotonic()
            if now - last_stats >= STATS_INTERVAL_S:
                stats = {
                    "type": "stats",
                    "buffered": len(self.outbox),
                    "dropped": self.dropped,
                    "step": self.core.engine.step_index if self.core else 0,
                }
                await self.link.send_text(encode(stats))
                last_stats = now
            await asyncio.sleep(SEND_INTERVAL_S)

    # ------------------------------------------------------------ commands
    async def _receive_forever(self) -> None:
        while True:
            msg = json.loads(await self.link.recv())
            if msg.get("type") == "command":
                task = asyncio.create_task(self._answer(msg))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            elif msg.get("type") == "error":
                log.warning("dashboard says: %s", msg.get("detail"))

    async def _answer(self, msg: dict[str, Any]) -> None:
        try:
            result = await self._command(msg.get("kind"), msg.get("args") or {})
            reply = {"type": "reply", "id": msg.get("id"), "ok": True, "result": result}
        except Exception as exc:
            reply = {"type": "reply", "id": msg.get("id"), "ok": False, "detail": error_detail(exc)}
        with contextlib.suppress(LinkClosed):
            # What the command made (a config frame, a state mark) goes out before its
            # reply: whoever awaited the reply then sees it in the session.
            await self.flush()
            await self.link.send_text(encode(reply))

    async def _command(self, kind: object, args: dict[str, Any]) -> Any:
        if kind == "workload":
            if self.workload is None:
                raise ValueError("the live session runs a scenario; the workload is off")
            # The spec is read by the engine thread each step; replacing it is atomic.
            return asdict(self.workload.update(**dict(args["changes"])))
        if kind == "load_scenario":
            try:
                scenario = load_named_scenario(str(args["name"]))
            except KeyError:
                raise UnknownCommand(f"no scenario named {args['name']!r}") from None
            return await self.start_session(scenario=scenario)
        if kind == "new_session":
            base = self.core.engine.config if self.core else self.settings.engine_config()
            config = base.with_updates(**dict(args.get("changes") or {}))
            return await self.start_session(config=config)
        if self.core is None:
            raise ValueError("the engine is starting")
        command, result_of = to_command(kind, args, self._next_req_id)
        result = await asyncio.wrap_future(self.core.submit(command))
        if kind in PAUSED_AFTER:
            self.sink.queue.put(("session", {"event": "state", "paused": PAUSED_AFTER[kind]}))
        return result_of(result)

    # ----------------------------------------------------------------- run
    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set or the dashboard closes the link (it is gone)."""
        await self.start_session()
        jobs = [
            asyncio.create_task(self._send_forever()),
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
                await self.flush()
            self.link.close()


def _tokenizer_info(runner: ModelRunner) -> dict[str, Any]:
    """What the dashboard needs to encode prompt text exactly as this runner would."""
    config = getattr(runner, "model_config", None)
    eos = list(getattr(config, "eos_token_ids", None) or [])
    return {
        "bos_token_id": getattr(config, "bos_token_id", None),
        "eos_token_id": eos[0] if eos else None,
    }
