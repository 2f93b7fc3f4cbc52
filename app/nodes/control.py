"""Where control actions go: the local engine thread, or a remote node over its ingest
socket. Both answer the same calls, so the API does not care which it drives."""

from __future__ import annotations

from typing import Any, Protocol

from app.live.engine_service import Admission, EngineBusy, EngineService, NewRequest
from app.live.hub import EventHub
from app.nodes.ingest import NodeRegistry, NodeUnavailable, RemoteNode
from engine.runner.tokenizer import ByteTokenizer, Tokenizer


class ControlTarget(Protocol):
    async def add_requests(self, items: list[NewRequest]) -> list[Admission]: ...

    async def abort(self, req_id: str) -> list[str]: ...

    async def update_config(self, changes: dict[str, Any]) -> dict[str, Any]: ...

    async def pause(self) -> None: ...

    async def resume(self) -> None: ...

    async def step(self) -> None: ...

    def tokenizer(self) -> Tokenizer: ...


class RemoteControl:
    """Commands for a node's engine, sent back over its ingest socket."""

    def __init__(self, node: RemoteNode) -> None:
        self.node = node
        self._count = 0

    async def _call(self, kind: str, **args: Any) -> Any:
        try:
            return await self.node.command(kind, **args)
        except NodeUnavailable as exc:
            raise EngineBusy(str(exc)) from None

    async def _add_request(self, item: NewRequest) -> Admission:
        result = await self._call(
            "add_request",
            prompt_token_ids=item.prompt_token_ids,
            priority=item.priority,
            max_tokens=item.params.max_tokens,
            temperature=item.params.temperature,
        )
        return Admission(str(result["req_id"]), result.get("rejected"))

    async def add_requests(self, items: list[NewRequest]) -> list[Admission]:
        return [await self._add_request(item) for item in items]

    async def abort(self, req_id: str) -> list[str]:
        result: list[str] = await self._call("abort", req_id=req_id)
        return result

    async def update_config(self, changes: dict[str, Any]) -> dict[str, Any]:
        try:
            result: dict[str, Any] = await self.node.command("update_config", changes=changes)
        except NodeUnavailable as exc:
            raise EngineBusy(str(exc)) from None
        return result

    async def pause(self) -> None:
        await self._call("pause")

    async def resume(self) -> None:
        await self._call("resume")

    async def step(self) -> None:
        await self._call("step")

    def tokenizer(self) -> Tokenizer:
        return ByteTokenizer()


def control_target(
    hub: EventHub, nodes: NodeRegistry, service: EngineService | None, session: str | None
) -> ControlTarget | None:
    """The engine behind `session` (default: the live one); None if nothing can be driven."""
    sid = session or hub.live_session
    if service is not None and sid is not None and sid == service.session:
        return service  # the local engine's session is never a node's
    node = nodes.by_session.get(sid) if sid is not None else None
    if node is not None:
        return RemoteControl(node)
    if service is not None and session is None:
        return service
    return None
