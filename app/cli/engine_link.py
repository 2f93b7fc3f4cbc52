"""`batchscope engine --link-fd N`: the engine process `batchscope serve` spawns and
supervises (app.live.supervisor). It serves app.nodes.engine_host over the socket it
inherited as fd N, and dies with its parent: EOF on the link, a parent-pid watch, and on
Linux PR_SET_PDEATHSIG (so even a SIGKILLed dashboard leaves no engine behind).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
from typing import TYPE_CHECKING

from app.cli.common import CliError, run_until_signalled, runner_from_settings

if TYPE_CHECKING:
    from app.bus.local import LocalSummaries
    from app.settings import Settings

PR_SET_PDEATHSIG = 1
PARENT_POLL_S = 0.5


def _die_with_parent() -> None:
    """Ask the kernel for SIGKILL when the parent goes (Linux; elsewhere EOF suffices)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def run_linked_engine(fd: int) -> int:
    from pydantic import ValidationError

    from app.nodes.engine_host import EngineHost
    from app.nodes.link import Link
    from app.settings import Settings
    from engine.config import EngineConfig
    from engine.runner.base import ModelRunner

    parent = os.getppid()
    _die_with_parent()
    if os.getppid() != parent:  # the parent went before the request took effect
        return 1
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise CliError(f"--link-fd {fd}: {exc}") from None
    try:
        settings = Settings()
        settings.engine_config()
    except (ValidationError, ValueError) as exc:
        raise CliError(str(exc)) from None

    def runner_for(config: EngineConfig) -> ModelRunner:
        runner: ModelRunner = runner_from_settings(settings, config)
        return runner

    logging.basicConfig(level=logging.INFO, format="batchscope engine: %(message)s")

    async def serve(stop: asyncio.Event) -> None:
        watch = asyncio.create_task(_watch_parent(parent, stop))
        bus = _bus_summaries(settings)
        host = EngineHost(
            await Link.open(sock), settings, runner_for, bus.tap if bus is not None else None
        )
        bus_done = asyncio.Event()
        publisher = asyncio.create_task(bus.run(bus_done)) if bus is not None else None
        try:
            await host.run(stop)
        finally:
            watch.cancel()
            if publisher is not None:  # the session's last summaries still go out
                bus_done.set()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(publisher, 10.0)

    run_until_signalled(serve)
    return 0


def _bus_summaries(settings: Settings) -> LocalSummaries | None:
    """With `serve --bus`: this engine's summaries on the fleet bus (app.bus.local)."""
    if not settings.bus:
        return None
    from app.bus.local import LocalSummaries

    limits = (settings.bus_max_age_s, int(settings.bus_max_mb * 1e6))
    return LocalSummaries(settings.bus, settings.bus_node_name(), limits)


async def _watch_parent(parent: int, stop: asyncio.Event) -> None:
    while os.getppid() == parent:
        await asyncio.sleep(PARENT_POLL_S)
    logging.getLogger("batchscope.engine").warning("the dashboard process is gone; stopping")
    stop.set()
