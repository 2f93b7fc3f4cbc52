"""LocalEngine: the dashboard's side of its own engine process. The process is a node like
any other (app.nodes.engine_host): its frames go through the same NodeRegistry checks into
the hub, and control goes back as the same commands. What is particular to it: it is
spawned and supervised here (app.live.supervisor), its sessions are the `local` ones and
always the live one, and it also starts scenario and fresh sessions, and the workload.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from app import fast_json
from app.live.health import Check
from app.live.hub import EventHub
from app.live.supervisor import EngineExit, EngineStatus, EngineSupervisor, describe_exit
from app.nodes.control import EngineBusy, RemoteControl
from app.nodes.ingest import NodeRegistry
from app.nodes.link import Link, LinkClosed
from app.nodes.link_intake import (
    ACK_EVERY,
    INTAKE_SHARE,
    INTAKE_WINDOW_S,
    LINES_PER_TURN,
    DutyCycle,
    FrameAcks,
)
from app.nodes.remote_node import NodeUnavailable, RemoteNode
from app.nodes.replies import Replies
from app.settings import Settings
from engine.runner.tokenizer import load_tokenizer
from protocol.codes import RECORDED_FRAME_TYPES, CommandKind, FrameType, MessageType
from protocol.envelope import split_frame
from protocol.wire import SessionMeta

log = logging.getLogger("batchscope.engine")

NODE = "local"
COMMAND_TIMEOUT_S = 30.0
READY_TIMEOUT_S = 60.0
"""How long a command waits for an engine process that is (re)starting."""
SILENT_AFTER_S = 5.0
"""An engine process silent this long (it reports every second) is unhealthy: hung."""


class LocalEngine:
    def __init__(
        self,
        settings: Settings,
        hub: EventHub,
        registry: NodeRegistry,
        loop_wanted: Callable[[], bool] | None = None,
    ) -> None:
        self.settings = settings
        self.loop_wanted = loop_wanted
        """Whether anyone else wants the event loop now (app.edge.loop_demand's
        LoopDemand.wanted); None: always someone."""
        self.hub = hub
        self.registry = registry
        self.session: str | None = None
        self.node: RemoteNode | None = None
        self.workload: dict[str, Any] | None = None
        self.link: Link | None = None
        self._ready = asyncio.Event()
        self._wake = asyncio.Event()
        """Set when a command is sent: frame intake stops resting (its reply is coming)."""
        self._acks = FrameAcks()
        self._replies = Replies()
        """Commands awaiting replies: they outlive a session switch (a new session's reply
        comes after its announce), so they are the process's, not a session node's."""
        self.engine_step: int | None = None
        """The engine's own step count (its latest stats), ahead of `step` when frames wait."""
        self.last_heard = time.monotonic()
        """When the engine process last said anything (it sends stats every second)."""
        self.control = RemoteControl(self)
        self.supervisor = EngineSupervisor(
            [sys.executable, "-m", "app.cli", "engine"],
            child_env(settings),
            self._serve_link,
            on_exit=self._on_exit,
        )

    # ------------------------------------------------------------ lifecycle
    async def start(self, wait_s: float = READY_TIMEOUT_S) -> None:
        """Spawn the engine process and wait (at most `wait_s`) for its first session."""
        await self.supervisor.start()
        try:
            await asyncio.wait_for(self._ready.wait(), wait_s)
        except TimeoutError:
            log.warning("the engine process has not announced a session yet")

    async def stop(self) -> None:
        await self.supervisor.stop()

    async def restart(self) -> str:
        """A fresh engine process (and so a new session); returns the new session's id."""
        await self.supervisor.restart()
        await self.ready()
        assert self.session is not None
        return self.session

    def status(self) -> dict[str, Any]:
        status: EngineStatus = self.supervisor.status()
        exit_ = status["last_exit"]
        live = self.hub.live_state(self.session) if self.session else None
        return {
            **status,
            "session": self.session,
            "step": live.step if live is not None else None,
            "engine_step": self.engine_step,
            "dropped_frames": self.node.producer_dropped if self.node else 0,
            "gaps": self.node.gaps if self.node else 0,
            "last_exit_text": describe_exit(exit_) if exit_ else None,
        }

    def health(self) -> Check:
        """/healthz's `engine` check: the process runs and has announced its session."""
        status = self.status()
        silent = time.monotonic() - self.last_heard
        if status["state"] == "running" and self._ready.is_set():
            if silent > SILENT_AFTER_S:
                text = f"no word from the engine process {status['pid']} for {silent:.0f} s"
                return Check(False, text, dict(status))
            text = f"engine process {status['pid']} running session {self.session}"
            return Check(True, text, dict(status))
        last = status["last_exit_text"]
        text = f"the local engine process is {status['state']}" + (
            f" (last exit: {last})" if last else ""
        )
        return Check(False, text, dict(status))

    async def ready(self) -> None:
        try:
            await asyncio.wait_for(self._ready.wait(), READY_TIMEOUT_S)
        except TimeoutError:
            raise EngineBusy("the local engine process is not running") from None

    # ------------------------------------------------------------- the link
    async def _serve_link(self, sock: socket.socket) -> None:
        link = await Link.open(sock)
        self.link = link
        duty = DutyCycle(INTAKE_SHARE, INTAKE_WINDOW_S)
        acks = asyncio.create_task(self._acks.send_idle(link, lambda: self.session))
        try:
            while True:
                started = time.perf_counter()
                for _ in range(LINES_PER_TURN):
                    self._handle(await link.recv())
                if self._acks.unacked(self.session) >= ACK_EVERY:
                    await self._acks.send(link, self.session)
                # A buffered line is returned without yielding: let the web have its turn,
                # and while anyone else wants the loop (a request, a websocket:
                # app.edge.loop_demand) keep intake to its share of it (viewers and pages
                # get the rest; the engine process holds or drops what waits, see
                # engine_host). Not while a command waits: its reply is behind at most a
                # window of frames, taken in at once, and a command sent during a rest
                # ends the rest.
                rest = duty.used(time.perf_counter() - started)
                if rest > 0 and not self._replies.pending and self._loop_wanted():
                    await self._rest(rest)
                else:
                    await asyncio.sleep(0)
        except LinkClosed:
            pass
        finally:
            acks.cancel()
            self._disconnected(link)

    def _loop_wanted(self) -> bool:
        return self.loop_wanted is None or self.loop_wanted()

    async def _rest(self, seconds: float) -> None:
        """Leave the loop to the web for `seconds`, or until a command is sent."""
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    def _handle(self, line: str) -> None:
        self.last_heard = time.monotonic()
        msg = fast_json.loads(line)
        kind = msg.get("type")
        if kind in RECORDED_FRAME_TYPES:
            self._on_frame(msg, line)
            return
        handle = LINK_MESSAGES.get(kind) if isinstance(kind, str) else None
        if handle is not None:
            handle(self, msg)

    def _on_frame(self, msg: dict[str, Any], line: str) -> None:
        if self.node is None:
            return
        self._acks.taken = int(msg["seq"])
        # Our own process encoded the frame once: forward its data's text as is.
        parts = split_frame(line)
        data_json = parts.data_json if parts else None
        self.registry.receive(self.node, msg, trusted=True, data_json=data_json)

    def _on_stats(self, msg: dict[str, Any]) -> None:
        if self.node is None:
            return
        self.registry.receive(self.node, msg)
        step = msg.get("step")
        self.engine_step = step if isinstance(step, int) else None

    def _on_reply(self, msg: Mapping[str, Any]) -> None:
        self._replies.settle(msg)

    def _announce(self, msg: Mapping[str, Any]) -> None:
        if self.session is not None and self.session != msg["session"]:
            self.hub.close_session(self.session)
            if self.node is not None:
                self.node.connected = False
        self.session = str(msg["session"])
        self._acks.taken = 0
        self.workload = msg.get("workload")
        tok = msg.get("tokenizer") or {}
        tokenizer = load_tokenizer(
            self.settings.model, tok.get("bos_token_id"), tok.get("eos_token_id")
        )
        self.control = RemoteControl(self, tokenizer)
        meta = cast(SessionMeta, dict(msg["meta"]))  # our engine process's (session_meta)
        self.node = self.registry.announce_local(self.session, meta, NODE)
        self.node.ws = self.link
        self._ready.set()

    def _disconnected(self, link: Link) -> None:
        if self.link is link:
            self.link = None
        self._ready.clear()
        if self.node is not None:
            self.registry.disconnected(self.node)
        self._replies.fail_all(NodeUnavailable("the local engine process exited"))

    def _on_exit(self, exit_: EngineExit) -> None:
        """The process is gone: say so in its session (recorded), then close it."""
        session, self.session = self.session, None
        if session is None or session not in self.hub.sessions:
            return
        self.hub.publish(
            session,
            FrameType.SESSION,
            {"event": "engine_exit", "detail": describe_exit(exit_), **exit_},
        )
        self.hub.close_session(session)

    # ------------------------------------------------------------- commands
    async def command(self, kind: str, **args: Any) -> Any:
        """Send a command to the engine process and await its reply."""
        await self.ready()
        link = self.link
        if link is None:
            raise NodeUnavailable("the local engine process is not running")
        self._wake.set()
        try:
            return await self._replies.call(link, kind, args, COMMAND_TIMEOUT_S)
        except LinkClosed:
            raise NodeUnavailable("the local engine process exited") from None
        except TimeoutError:
            raise NodeUnavailable("the local engine did not answer in time") from None

    async def _local(self, kind: str, **args: Any) -> Any:
        try:
            return await self.command(kind, **args)
        except NodeUnavailable as exc:
            raise EngineBusy(str(exc)) from None

    async def set_workload(self, **changes: Any) -> dict[str, Any]:
        spec: dict[str, Any] = await self._local(CommandKind.WORKLOAD, changes=changes)
        self.workload = spec
        return spec

    def workload_spec(self) -> dict[str, Any] | None:
        return self.workload

    async def load_scenario(self, name: str) -> str:
        """Start a new live session running scenarios/NAME.json in the engine process."""
        return str(await self._local(CommandKind.LOAD_SCENARIO, name=name))

    async def new_session(self, changes: dict[str, Any]) -> str:
        """Start a new live session with the current knobs changed by `changes` (those
        that cannot change while running, such as async_scheduling, included)."""
        return str(await self._local(CommandKind.NEW_SESSION, changes=changes))


LINK_MESSAGES: dict[str, Callable[[LocalEngine, dict[str, Any]], None]] = {
    MessageType.STATS.value: LocalEngine._on_stats,
    MessageType.ANNOUNCE.value: LocalEngine._announce,
    MessageType.REPLY.value: LocalEngine._on_reply,
}
"""The engine process's messages on its link other than its frames, by type (frames:
RECORDED_FRAME_TYPES)."""


def child_env(settings: Settings) -> dict[str, str]:
    """The engine process's settings, as the BATCHSCOPE_* variables it reads (the web's
    own: token, database and allowed hosts, stay out of its environment)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHSCOPE_")}
    values = settings.model_dump(exclude={"token", "allowed_hosts", "database_url"})
    for key, value in values.items():
        if value is not None:
            env[f"BATCHSCOPE_{key.upper()}"] = (
                str(value).lower() if isinstance(value, bool) else str(value)
            )
    return env
