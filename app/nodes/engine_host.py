"""The dashboard's own engine process (`batchscope engine --link-fd N`, spawned and supervised
by `batchscope serve`): a node like any `batchscope engine --push`, speaking the ingest
protocol over a socketpair link (app.nodes.link) instead of a websocket.

Frames are converted on the engine thread and JSON-encoded once, here; the dashboard only
folds and forwards them. New sessions (a scenario, other knobs, a restart) start here too,
each announced on the same link. The engine never waits on the link: frames the dashboard
does not take in time are dropped and counted, and the jump in seq is its visible gap.

Flow control is a credit window: the dashboard acknowledges the frames it has folded
(`{"type": "ack", "session", "seq"}`), and at most WINDOW_FRAMES frames are on the link
unacknowledged; the rest wait in the outbox (a paced engine drops past MAX_OUTBOX). A
flat-out simulation waits while AHEAD_FRAMES of its frames are not folded yet (made,
waiting or on the link). A reply follows the frames its command made, sent with them at
once (no wait for acks): it is queued behind at most those few frames, so commands answer
promptly at any rate.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

from app.nodes.commands import PAUSED_AFTER, UnknownCommand, error_detail, to_command
from app.nodes.link import Link, LinkClosed
from app.nodes.producer import QueueSink
from app.nodes.scenarios import ScenarioArrivals, load_named_scenario, load_trace_workload
from app.settings import Settings
from engine.config import EngineConfig, knobs_to_reset
from engine.engine import Engine
from engine.engine_core import EngineCore
from engine.runner.base import ModelRunner
from engine.scenario import Scenario
from engine.workload import PoissonWorkload
from protocol import control
from protocol.codes import FrameType, MessageType, SessionEvent
from protocol.envelope import encode
from protocol.producer import ProducerCore
from protocol.session import engine_fields, new_session_id, session_meta

log = logging.getLogger("batchscope.engine")

SEND_INTERVAL_S = 0.01
STATS_INTERVAL_S = 0.25
WINDOW_FRAMES = 16
"""Frames on the link that the dashboard has not acknowledged yet, at most."""
AHEAD_FRAMES = 12
"""Frames of a flat-out simulation not folded yet (queued, waiting, on the link) before it
waits: what lies ahead of a command's reply, each a fold the dashboard makes first."""
MAX_OUTBOX = 50_000
"""Frames waiting for the link; past it new frames are dropped (a gap the dashboard marks)."""
REPLY_AHEAD_MAX = 256
"""A reply goes out with up to this many frames ahead of it, past the window; a paced
engine with more waiting (a dashboard far behind) lets them through the window first."""
ACK_POLL_S = 0.002
COMMAND_FLUSH_S = 5.0
"""A reply waits at most this long for its command's frames to get through the window."""
NODE = "local"

RunnerFactory = Callable[[EngineConfig], ModelRunner]
FrameTap = Callable[[str, int, str, Mapping[str, Any]], None]
"""(session, seq, frame type, data) of every frame the engine made, dropped or not: what
else watches the engine (with --bus, the fleet bus's summaries: app.bus.local)."""


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
        self.tap = tap
        self.settings = settings
        self.make_runner = make_runner
        self.session: str | None = None
        self.core: EngineCore | None = None
        self.sink = QueueSink()
        self.workload: PoissonWorkload | None = None
        self.frames = ProducerCore("", NODE, keep_sent=False)
        """The session's seq and its outbox: frames not written to the link yet (`sent`:
        the newest seq written), the holes of what the outbox could not take."""
        self.acked = 0
        """The newest seq of this session the dashboard has folded (its last ack)."""
        self._req_ids = itertools.count(1)
        self._switching = asyncio.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._frames_made = asyncio.Event()
        """Set (from the engine thread) when a flat-out engine has frames to send."""
        self._kicked = False
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
                await self.flush(window=False)
            config = config or (scenario.config if scenario else self.settings.engine_config())
            trace = self.settings.workload_trace() if scenario is None else None
            if trace:
                scenario = await asyncio.to_thread(
                    load_trace_workload, trace, config, self.settings.trace_block_tokens
                )
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
            self._loop = asyncio.get_running_loop()
            self.session = session
            self.frames = ProducerCore(session, NODE, keep_sent=False)
            self.acked = 0
            announce = self.frames.hello(
                {
                    "meta": meta,
                    "workload": self.workload_spec(),
                    "scenario": scenario.name if scenario else None,
                    "tokenizer": _tokenizer_info(runner),
                }
            )
            await self.link.send_text(encode(announce))
            self._queue_frame(FrameType.SESSION, {"event": SessionEvent.OPENED, **meta})
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
        """(Engine thread, before each step of a flat-out simulation) AHEAD_FRAMES frames
        are made but not folded by the dashboard yet: wait. Frames made since the last
        flush are sent now, not at the next tick: with so few in flight, the pipeline is
        only as fast as its hand-overs."""
        frames = self.frames
        waiting = self.sink.queue.qsize() + len(frames)
        if waiting and not self._kicked and self._loop is not None:
            self._kicked = True
            with contextlib.suppress(RuntimeError):  # the loop closed: the process ends
                self._loop.call_soon_threadsafe(self._frames_made.set)
        return waiting + frames.sent - self.acked >= AHEAD_FRAMES

    def window_left(self) -> int:
        """Frames the link may take now without overrunning the dashboard."""
        return WINDOW_FRAMES - (self.frames.sent - self.acked)

    def workload_spec(self) -> dict[str, Any] | None:
        return asdict(self.workload.spec) if self.workload else None

    def _next_req_id(self) -> str:
        return f"req-{next(self._req_ids)}"

    # -------------------------------------------------------------- frames
    def _queue_frame(self, frame_type: str, data: Mapping[str, Any]) -> None:
        frames = self.frames
        if len(frames) >= MAX_OUTBOX:
            frames.hole()  # the dashboard sees the seq jump and marks the gap
        else:
            frames.add(frame_type, encode(data))

    def _collect(self) -> None:
        for frame_type, data in self.sink.drain():
            self._queue_frame(frame_type, data)
            if self.tap is not None and self.session is not None:
                self.tap(self.session, self.frames.seq, frame_type, data)

    async def flush(self, window: bool = True, then: str | None = None) -> None:
        """Send what waits, as far as the window allows (all of it at a session's end, or
        before a reply), and `then` (a reply) after it in the same write."""
        self._collect()
        frames = self.frames
        batch = frames.pending(limit=self.window_left() if window else None)
        lines = [text for _, text in batch]
        if batch:
            frames.mark_sent(batch[-1][0])
        if then is not None:
            lines.append(then)
        if lines:
            await self.link.send_lines(lines)

    async def flush_through(self, seq: int, timeout: float = COMMAND_FLUSH_S) -> None:
        """Send every frame up to `seq` (a command's own frames), as acks make room."""
        deadline = time.monotonic() + timeout
        await self.flush()
        while self.frames and self.frames.oldest <= seq and time.monotonic() < deadline:
            await asyncio.sleep(ACK_POLL_S)
            await self.flush()

    def on_ack(self, msg: Mapping[str, Any]) -> None:
        seq = msg.get("seq")
        if msg.get("session") == self.session and isinstance(seq, int) and seq > self.acked:
            self.acked = min(seq, self.frames.sent)

    async def _send_forever(self) -> None:
        last_stats = 0.0
        while True:
            self._kicked = False
            self._frames_made.clear()
            await self.flush()
            now = time.monotonic()
            if now - last_stats >= STATS_INTERVAL_S:
                stats = self.frames.stats()
                stats["step"] = self.core.engine.step_index if self.core else 0
                await self.link.send_text(encode(stats))
                last_stats = now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._frames_made.wait(), SEND_INTERVAL_S)

    # ------------------------------------------------------------ commands
    async def _receive_forever(self) -> None:
        while True:
            msg = json.loads(await self.link.recv())
            if msg.get("type") == MessageType.ACK:
                self.on_ack(msg)
                # The room an ack makes is used at once: frames the engine made while it
                # waited for it (still on the sink's queue) go too, not at the next tick.
                await self.flush()
            elif msg.get("type") == MessageType.COMMAND:
                task = asyncio.create_task(self._answer(msg))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            elif msg.get("type") == MessageType.ERROR:
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
            self._collect()
            if len(self.frames) <= REPLY_AHEAD_MAX:
                await self.flush(window=False, then=encode(reply))
                return
            await self.flush_through(self.frames.seq)
            await self.link.send_text(encode(reply))

    async def _command(self, kind: object, args: Mapping[str, Any]) -> Any:
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
            changes = dict(args.get("changes") or {})
            if "vllm_version" in changes:  # knobs carried over, not asked for, that the
                # chosen release lacks go back to their defaults; asked-for ones are refused
                changes = {**knobs_to_reset(base, str(changes["vllm_version"])), **changes}
            config = base.with_updates(**changes)
            return await self.start_session(config=config)
        if self.core is None:
            raise ValueError("the engine is starting")
        command, result_of = to_command(kind, args, self._next_req_id)
        result = await asyncio.wrap_future(self.core.submit(command))
        if kind in PAUSED_AFTER:
            self.sink.queue.put(
                (FrameType.SESSION, {"event": SessionEvent.STATE, "paused": PAUSED_AFTER[kind]})
            )
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
                await self.flush(window=False)
            self.link.close()


def _tokenizer_info(runner: ModelRunner) -> dict[str, Any]:
    """What the dashboard needs to encode prompt text exactly as this runner would."""
    config = getattr(runner, "model_config", None)
    eos = list(getattr(config, "eos_token_ids", None) or [])
    return {
        "bos_token_id": getattr(config, "bos_token_id", None),
        "eos_token_id": eos[0] if eos else None,
    }
