"""Connecting to the bus with reconnects that never give up, creating its two JetStream
streams (their names, subjects and settings: protocol.bus, shared with the vLLM adapter),
and a dashboard's durable consumers on them."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from protocol.bus import PREFIX, STREAM, stream_fields

if TYPE_CHECKING:  # nats is imported where a bus is used, not by every dashboard
    from nats.aio.client import Client
    from nats.js import JetStreamContext

log = logging.getLogger("batchscope.bus")


FIRST_CONNECT_S = 20.0
"""How long a dashboard or an engine waits for the bus at start before it gives up."""


async def connect(url: str, name: str, first_timeout: float | None = None) -> Client:
    """A client that keeps reconnecting (a bus restart is an outage, not the end).
    `first_timeout`: a bus that does not answer at all within it is an error (nats-py
    retries a first connection forever), so a process started against a wrong URL says so
    instead of hanging."""
    import nats

    if first_timeout is not None:
        try:
            return await asyncio.wait_for(connect(url, name), first_timeout)
        except TimeoutError:
            raise ConnectionError(
                f"the bus at {url} did not answer within {first_timeout:.0f} s"
            ) from None
    return await nats.connect(
        url,
        name=name,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        allow_reconnect=True,
        connect_timeout=3,
        pending_size=8 * 1024 * 1024,
        error_cb=_quiet,
        disconnected_cb=_disconnected,
        reconnected_cb=_reconnected,
    )


async def _quiet(exc: Exception) -> None:
    log.debug("bus: %s", exc)


async def _disconnected() -> None:
    log.warning("bus: disconnected; reconnecting")


async def _reconnected() -> None:
    log.warning("bus: reconnected")


async def ensure_streams(js: JetStreamContext, max_age_s: float, max_bytes: int) -> None:
    """Create the streams if they are missing (an existing stream keeps its limits)."""
    from nats.js import api
    from nats.js.errors import NotFoundError

    wanted = stream_fields(max_age_s, max_bytes)
    for name, fields in wanted:
        try:
            await js.stream_info(name)
        except NotFoundError:
            config = api.StreamConfig(
                name=name,
                storage=api.StorageType.FILE,
                discard=api.DiscardPolicy.OLD,
                **fields,
            )
            try:
                await js.add_stream(config)
            except Exception as exc:  # another process created it first
                log.debug("add_stream %s: %s", name, exc)
                await js.stream_info(name)


async def pull_consumer(
    js: JetStreamContext, name: str, kind: str, **config: Any
) -> JetStreamContext.PullSubscription:
    """The durable pull consumer `{name}-{kind}` of every node's `kind` messages (`config`:
    its nats.js.api.ConsumerConfig fields)."""
    from nats.js import api

    return await js.pull_subscribe(
        f"{PREFIX}.*.{kind}",
        durable=f"{name}-{kind}",
        stream=STREAM,
        config=api.ConsumerConfig(**config),
    )
