"""Where control actions go: the local engine thread, or a remote node over its ingest
socket. Both answer the same calls, so the API does not care which it drives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from app.live.hub import EventHub
from app.nodes.ingest import NodeRegistry
from app.nodes.remote_node import NodeUnavailable
from engine.request import SamplingParams
from engine.runner.tokenizer import ByteTokenizer, Tokenizer
from protocol.wire import Knobs

if TYPE_CHECKING:
    from app.nodes.local_engine import LocalEngine


class EngineBusy(RuntimeError):
    """No engine can take the command now (none running, disconnected, no answer)."""


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


class Commander(Protocol):
    """An engine process reached over a socket: a node's ingest socket, or our own link."""

    async def command(self, kind: str, **args: Any) -> Any: ...


class ControlTarget(Protocol):
    async def add_requests(self, items: list[NewRequest]) -> list[Admission]: ...

    async def abort(self, req_id: str) -> list[str]: ...

    async def update_config(self, changes: Knobs) -> Knobs: ...

    async def pause(self) -> None: ...

    async def resume(self) -> None: ...

    async def step(self) -> None: ...

    def tokenizer(self) -> Tokenizer: ...


class RemoteControl:
    """Commands for a node's engine, sent back over its ingest socket (or link)."""

    def __init__(self, node: Commander, tokenizer: Tokenizer | None = None) -> None:
        self.node = node
        self._tokenizer = tokenizer

    async def _call(self, kind: str, **args: Any) -> Any:
        try:
            return await self.node.command(kind, **args)
        except NodeUnavailable as exc:
            raise EngineBusy(str(exc)) from None

    async def add_requests(self, items: list[NewRequest]) -> list[Admission]:
        """A burst in one command (one hop, however many requests)."""
        wire = [
            {
                "prompt_token_ids": item.prompt_token_ids,
                "priority": item.priority,
                "max_tokens": item.params.max_tokens,
                "temperature": item.params.temperature,
            }
            for item in items
        ]
        result = await self._call("add_requests", items=wire)
        return [Admission(str(r["req_id"]), r.get("rejected")) for r in result]

    async def abort(self, req_id: str) -> list[str]:
        result: list[str] = await self._call("abort", req_id=req_id)
        return result

    async def update_config(self, changes: Knobs) -> Knobs:
        result: Knobs = await self._call("update_config", changes=changes)
        return result

    async def pause(self) -> None:
        await self._call("pause")

    async def resume(self) -> None:
        await self._call("resume")

    async def step(self) -> None:
        await self._call("step")

    def tokenizer(self) -> Tokenizer:
        return self._tokenizer or ByteTokenizer()


def control_target(
    hub: EventHub, nodes: NodeRegistry, local: LocalEngine | None, session: str | None
) -> ControlTarget | None:
    """The engine behind `session` (default: the live one); None if nothing can be driven."""
    sid = session or hub.live_session
    if local is not None and (sid is None or sid == local.session):
        return local.control  # the local engine's session is never another node's
    node = nodes.by_session.get(sid) if sid is not None else None
    if node is not None:
        return RemoteControl(node)
    if local is not None and session is None:
        return local.control
    return None
