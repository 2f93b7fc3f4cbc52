"""EngineSupervisor: spawns the dashboard's own engine process (`batchscope engine
--link-fd N`), hands the parent's end of its socketpair to whoever serves the link, keeps the
last lines of its stderr, and when it exits records how and starts a fresh one with backoff.
Shutdown stops it in order (SIGTERM, then SIGKILL); the child also dies with this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from typing_extensions import TypedDict

log = logging.getLogger("batchscope.supervisor")

STDERR_LINES = 40
BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
STABLE_S = 60.0
"""A child that ran this long resets the backoff."""
STOP_GRACE_S = 5.0

LinkServer = Callable[[socket.socket], Awaitable[None]]
"""Serves the link of one child until it closes."""
ExitHook = Callable[["EngineExit"], None]


class EngineExit(TypedDict):
    pid: int
    code: int | None
    """The exit status; negative: killed by that signal."""
    signal: str | None
    at: float
    ran_s: float
    stderr: list[str]
    """Its last lines of stderr."""
    requested: bool
    """It was stopped on request (a restart, a stop), not a crash."""


class EngineStatus(TypedDict):
    state: str
    """`starting`, `running`, `restarting` (on request), `exited` (a crash: a restart is
    due), `stopped`."""
    pid: int | None
    started_at: float | None
    restarts: int
    next_start_in_s: float | None
    last_exit: EngineExit | None


@dataclass
class EngineSupervisor:
    argv: list[str]
    env: dict[str, str]
    serve_link: LinkServer
    on_exit: ExitHook | None = None
    state: str = "stopped"
    restarts: int = 0
    last_exit: EngineExit | None = None
    proc: asyncio.subprocess.Process | None = None
    started_at: float | None = None
    stderr: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_LINES))
    _stopping: bool = False
    _failures: int = 0
    _next_start: float | None = None
    _watch: asyncio.Task[None] | None = None
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by a stop: ends a backoff wait at once."""

    # ------------------------------------------------------------ control
    async def start(self) -> None:
        self._stopping = False
        await self._spawn()

    async def restart(self) -> None:
        """Replace the engine process now (a user's Restart): stop it, start a fresh one."""
        self._failures = 0
        self.state = "restarting"
        await self._halt()
        self._stopping = False
        await self._spawn()

    async def stop(self) -> None:
        await self._halt()
        self.state = "stopped"

    def status(self) -> EngineStatus:
        due = None
        if self._next_start is not None:
            due = round(max(0.0, self._next_start - time.monotonic()), 3)
        return {
            "state": self.state,
            "pid": self.proc.pid if self.proc and self.proc.returncode is None else None,
            "started_at": self.started_at,
            "restarts": self.restarts,
            "next_start_in_s": due,
            "last_exit": self.last_exit,
        }

    # ---------------------------------------------------------- lifecycle
    async def _spawn(self) -> None:
        parent_end, child_end = socket.socketpair()
        fd = child_end.fileno()
        self.stderr.clear()
        self._wake.clear()
        self.state = "starting"
        self._next_start = None
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv,
                "--link-fd",
                str(fd),
                pass_fds=(fd,),
                env=self.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                # Its own process group: a terminal's Ctrl-C reaches the dashboard, which
                # then stops the engine in order (no half-written frames).
                start_new_session=True,
            )
        finally:
            child_end.close()
        self.started_at = time.time()
        self._watch = asyncio.create_task(self._supervise(self.proc, parent_end))

    async def _supervise(self, proc: asyncio.subprocess.Process, link: socket.socket) -> None:
        began = time.monotonic()
        jobs = [
            asyncio.create_task(self._read_stderr(proc)),
            asyncio.create_task(self._serve(link)),
        ]
        self.state = "running"
        code = await proc.wait()
        # Whatever it wrote before dying still arrives (the link and stderr drain to EOF).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*jobs, return_exceptions=True), 5.0)
        for job in jobs:
            job.cancel()
        ran = time.monotonic() - began
        self.last_exit = {
            "pid": proc.pid,
            "code": code,
            "signal": signal.Signals(-code).name if code < 0 and -code in _SIGNALS else None,
            "at": time.time(),
            "ran_s": round(ran, 3),
            "stderr": list(self.stderr),
            "requested": self._stopping,
        }
        if self.on_exit is not None:
            self.on_exit(self.last_exit)
        if self._stopping:
            return
        log.warning("the engine process exited (%s); restarting", _describe(self.last_exit))
        self._failures = 0 if ran >= STABLE_S else self._failures + 1
        delay = BACKOFF_S[min(self._failures, len(BACKOFF_S)) - 1] if self._failures else 0.0
        self.state = "exited"
        self._next_start = time.monotonic() + delay
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), delay)
        if not self._stopping:
            self.restarts += 1
            await self._spawn()

    async def _serve(self, sock: socket.socket) -> None:
        try:
            await self.serve_link(sock)
        except Exception:
            log.exception("serving the engine's link failed")
        finally:
            sock.close()

    async def _read_stderr(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        while line := await proc.stderr.readline():
            text = line.decode(errors="replace").rstrip()
            self.stderr.append(text[:500])
            print(text, file=sys.stderr, flush=True)

    async def _halt(self) -> None:
        self._stopping = True
        self._wake.set()
        proc, watch = self.proc, self._watch
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        if watch is not None and watch is not asyncio.current_task():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(watch, 10.0)


_SIGNALS = {s.value for s in signal.Signals}


def _describe(exit_: EngineExit) -> str:
    if exit_["signal"]:
        return f"killed by {exit_['signal']}"
    return f"exit code {exit_['code']}"


def describe_exit(exit_: EngineExit) -> str:
    """`killed by SIGKILL after 12.3 s` / `exit code 1 after 0.4 s` / `stopped on request
    (exit code 0) after 5 s`."""
    if exit_.get("requested"):
        return f"stopped on request ({_describe(exit_)}) after {exit_['ran_s']:g} s"
    return f"{_describe(exit_)} after {exit_['ran_s']:g} s"
