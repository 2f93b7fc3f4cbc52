"""Where control actions go: the local engine thread, or a remote node over its ingest
socket. Both answer the same calls, so the API does not care which it drives."""

from __future__ import annotations

from typing import Any, Protocol

from app.live.engine_service import EngineBusy, EngineService
from app.nodes.ingest import NodeUnavailable, RemoteNode
from engine.request import SamplingParams
from engine.runner.tokenizer import ByteTokenizer, Tokenizer


class ControlTarget(Protocol):
    async def add_request(
        self, prompt_token_ids: list[int], params: SamplingParams, priority: int = 0
    ) -> tuple[str, str | None]: ...

    async def add_requests(
        self, items: list[tuple[list[int], SamplingParams, int]]
    ) -> list[tuple[str, str | None]]: ...

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

    async def add_request(
        self, prompt_token_ids: list[int], params: SamplingParams, priority: int = 0
    ) -> tuple[str, str | None]:
        result = await self._call(
            "add_request",
            prompt_token_ids=prompt_token_ids,
            priority=priority,
            max_tokens=params.max_tokens,
            temperature=params.temperature,
        )
        return str(result["req_id"]), result.get("rejected")

    async def add_requests(
        self, items: list[tuple[list[int], SamplingParams, int]]
    ) -> list[tuple[str, str | None]]:
        return [await self.add_request(p, sp, prio) for p, sp, prio in items]

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


def control_target(app_state: Any, session: str | None) -> ControlTarget | None:
    """The engine behind `session` (default: the live one); None if nothing can be driven."""
    sid = session or app_state.hub.live_session
    nodes = app_state.nodes.by_session
    if sid in nodes:
        return RemoteControl(nodes[sid])
    service: EngineService | None = app_state.service
    if service is not None and (session is None or session == service.session):
        return service
    return None
