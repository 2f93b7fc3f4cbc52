"""How every producer names and describes a session: its id, its metadata (what the hub
keeps, the `opened` frame carries and the sessions table records) and a node's `opened`
frame. The local engine, `batchscope engine --push`, ingest, re-runs and the vLLM adapter
all build them here, so this module uses the standard library only.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import Any, Protocol, cast

from protocol.codes import SessionEvent
from protocol.wire import SessionData, SessionMeta


class DescribedRunner(Protocol):
    """What the metadata reads from one of our runners (engine.runner.base.ModelRunner)."""

    name: str
    simulated: bool

    def describe(self) -> dict[str, object]: ...


def new_session_id() -> str:
    """`s-YYYYmmdd-HHMMSS-xxxxxx`: sortable by start, unique across producers."""
    return time.strftime("s-%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def session_meta(
    name: str,
    source: str,
    *,
    engine: str = "batchscope",
    runner: str = "",
    simulated: bool = False,
    model: str = "",
    device: str = "",
    config: Mapping[str, Any] | None = None,
    **extra: Any,
) -> SessionMeta:
    """A session's metadata. `source`: `local`, `rerun` or `node:NAME`; `extra`: what a
    source adds (`node`, `describe` (our runner's own description), `rerun_of`...)."""
    meta = {
        "name": name,
        "source": source,
        "engine": engine,
        "runner": runner,
        "simulated": simulated,
        "model": model,
        "device": device,
        "config": dict(config or {}),
        "started_at": time.time(),
        **extra,
    }
    return cast(SessionMeta, meta)


def engine_fields(runner: DescribedRunner, config: Mapping[str, Any]) -> dict[str, Any]:
    """Our own engine's part of the metadata (local sessions and `engine --push` nodes)."""
    describe = runner.describe()
    return {
        "engine": "batchscope",
        "runner": runner.name,
        "simulated": runner.simulated,
        "model": str(describe.get("model") or ""),
        "device": str(describe.get("device") or ""),
        "config": dict(config),
        "describe": describe,
    }


def node_source(node: str) -> str:
    return f"node:{node}"


def node_opened(node: str, announce: Mapping[str, Any]) -> SessionData:
    """A node's first frame (`session` `opened`): its announce, as a session's metadata."""
    fields = {k: v for k, v in announce.items() if k not in ("name", "source", "node")}
    name = str(announce.get("name") or node)
    meta = session_meta(name, node_source(node), node=node, **fields)
    return cast(SessionData, {"event": SessionEvent.OPENED, **meta})
