"""The bus's names and streams: subjects per node and kind, the two JetStream streams and
their retention limits, and connecting with reconnects that never give up.

Subjects (`<node>` is the node's name made subject-safe by `token()`):
- `batchscope.<node>.summary`: per-step summaries, always (stream BATCHSCOPE);
- `batchscope.<node>.frames`: full protocol frames, while someone watches (stream BATCHSCOPE);
- `batchscope.<node>.announce`: the node's announce, last one kept (stream BATCHSCOPE_NODES);
- `batchscope.<node>.control`: requests to the node (core NATS request/reply, not stored).
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # nats is imported where a bus is used, not by every dashboard
    from nats.aio.client import Client
    from nats.js import JetStreamContext

log = logging.getLogger("batchscope.bus")

PREFIX = "batchscope"
STREAM = "BATCHSCOPE"
NODES_STREAM = "BATCHSCOPE_NODES"
MAX_MSG_BYTES = 512 * 1024
"""A frames message stays under this (NATS's default max payload is 1 MB)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def token(node: str) -> str:
    """`node` as one subject token: letters, digits, _ and - (others become _)."""
    return _UNSAFE.sub("_", node)[:100] or "_"


def subject(node: str, kind: str) -> str:
    return f"{PREFIX}.{token(node)}.{kind}"


def node_of(subj: str) -> str:
    """The subject-safe node token of a `batchscope.<node>.<kind>` subject."""
    parts = subj.split(".")
    return parts[1] if len(parts) == 3 else ""


def check_url(url: str) -> str:
    if not re.fullmatch(r"nats://\S+", url):
        raise ValueError(f"--bus {url!r}: expected a nats://HOST:PORT URL")
    return url


async def connect(url: str, name: str) -> Client:
    """A client that keeps reconnecting (a bus restart is an outage, not the end)."""
    import nats

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

    wanted: list[tuple[str, dict[str, Any]]] = [
        (
            STREAM,
            {
                "subjects": [f"{PREFIX}.*.summary", f"{PREFIX}.*.frames"],
                "max_age": max_age_s,
                "max_bytes": max_bytes,
                "duplicate_window": min(120.0, max_age_s),
            },
        ),
        (NODES_STREAM, {"subjects": [f"{PREFIX}.*.announce"], "max_msgs_per_subject": 1}),
    ]
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
