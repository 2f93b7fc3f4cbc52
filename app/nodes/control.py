"""Where control actions go: the local engine thread, or a remote node over its ingest
socket. Both answer the same calls, so the API does not care which it drives."""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

from app.live.hub import EventHub
from app.nodes.ingest import NodeRegistry
from app.nodes.remote_node import NodeUnavailable
from engine.request import SamplingParams
from engine.runner.tokenizer import ByteTokenizer, Tokenizer
from protocol.codes import CommandKind
from protocol.wire import Knobs


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
        result = await self._call(CommandKind.ADD_REQUESTS, items=wire)
        return [Admission(str(r["req_id"]), r.get("rejected")) for r in result]

    async def abort(self, req_id: str) -> list[str]:
        result: list[str] = await self._call(CommandKind.ABORT, req_id=req_id)
        return result

    async def update_config(self, changes: Knobs) -> Knobs:
        result: Knobs = await self._call(CommandKind.UPDATE_CONFIG, changes=changes)
        return result

    async def pause(self) -> None:
        await self._call(CommandKind.PAUSE)

    async def resume(self) -> None:
        await self._call(CommandKind.RESUME)

    async def step(self) -> None:
        await self._call(CommandKind.STEP)

    def tokenizer(self) -> Tokenizer:
        return self._tokenizer or ByteTokenizer()


class LocalProducer(Protocol):
    """The dashboard's own engine process, as control reads it (app.nodes.local_engine)."""

    @property
    def session(self) -> str | None:
        """Its session (None while it starts one)."""

    @property
    def control(self) -> ControlTarget: ...


class NoControl(RuntimeError):
    """The session's producer cannot take commands (read-only, ended, a recording): the
    reason, answered as a 409 and shown on the page; never sent to another engine."""


READ_ONLY_ENGINES = {"vllm": "vLLM"}
"""Producers that observe and never obey (their `engine`: its name in a sentence): an
observed vLLM node refuses every command, so none is sent to it."""


def control_session(hub: EventHub, local: LocalProducer | None, session: str | None) -> str | None:
    """The session a control action aims at: `session`, else the live one (else the local
    engine's, while it is starting one)."""
    return session or hub.live_session or (local.session if local is not None else None)


def control_refusal(
    hub: EventHub, nodes: NodeRegistry, local: LocalProducer | None, sid: str | None
) -> str | None:
    """Why the producer of session `sid` cannot be driven, or None when it can."""
    if local is not None and (sid is None or sid == local.session):
        return None
    if sid is None:
        return "no engine to control: no live session"
    info = hub.sessions.get(sid)
    if info is None:
        return f"session {sid!r} is not live: a recording has no producer to control"
    node = nodes.by_session.get(sid)
    if node is None:
        return f"session {sid!r} has no producer to control (a recording or a re-run)"
    if node.ended or not info.live:
        how = f" ({node.ended})" if node.ended else ""
        return f"session {sid!r} has ended{how}: its producer takes no more commands"
    if node.engine in READ_ONLY_ENGINES:
        name = READ_ONLY_ENGINES[node.engine]
        return f"node {node.node!r} is an observed {name} node: it is read-only (no control)"
    return None


def control_target(
    hub: EventHub, nodes: NodeRegistry, local: LocalProducer | None, session: str | None
) -> ControlTarget:
    """The engine behind `session` (default: the live one). Raises NoControl (the reason)
    when its producer cannot be driven: a command never goes to another engine."""
    sid = control_session(hub, local, session)
    refusal = control_refusal(hub, nodes, local, sid)
    if refusal is not None:
        raise NoControl(refusal)
    if local is not None and (sid is None or sid == local.session):
        return local.control  # the local engine's session is never another node's
    assert sid is not None
    return RemoteControl(nodes.by_session[sid])
