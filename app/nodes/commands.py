"""Control commands as they travel to an engine process (`{"type": "command", "id", "kind",
"args"}` on its ingest socket or link) turned into engine commands, and the engine's
results turned into the reply's `result`. Shared by every producer of ours: a pushing
`batchscope engine` and the dashboard's own engine process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from engine.commands import (
    Abort,
    AddRequest,
    AddRequests,
    Command,
    Pause,
    Resume,
    Step,
    UpdateConfig,
)
from engine.request import SamplingParams
from protocol.codes import CommandKind

ResultOf = Callable[[Any], Any]
"""Turns what the engine answered into the reply's JSON `result`."""
Build = Callable[[Mapping[str, Any], Callable[[], str]], tuple[Command, ResultOf]]
"""A command's arguments (and the maker of request ids) to the engine command and its
ResultOf."""


class UnknownCommand(ValueError):
    pass


def _add_request(args: Mapping[str, Any], req_id: str) -> AddRequest:
    params = SamplingParams(
        max_tokens=int(args["max_tokens"]), temperature=float(args.get("temperature", 0.0))
    )
    return AddRequest(
        req_id,
        [int(t) for t in args["prompt_token_ids"]],
        params,
        int(args.get("priority", 0)),
    )


def _add_one(args: Mapping[str, Any], next_req_id: Callable[[], str]) -> tuple[Command, ResultOf]:
    req_id = next_req_id()
    return _add_request(args, req_id), lambda reason: {"req_id": req_id, "rejected": reason}


def _add_many(args: Mapping[str, Any], next_req_id: Callable[[], str]) -> tuple[Command, ResultOf]:
    items = tuple(_add_request(item, next_req_id()) for item in args["items"])
    return AddRequests(items), lambda reasons: [
        {"req_id": c.req_id, "rejected": r} for c, r in zip(items, reasons, strict=True)
    ]


def _abort(args: Mapping[str, Any], next_req_id: Callable[[], str]) -> tuple[Command, ResultOf]:
    del next_req_id
    return Abort((str(args["req_id"]),)), lambda ids: list(ids)


def _update_config(
    args: Mapping[str, Any], next_req_id: Callable[[], str]
) -> tuple[Command, ResultOf]:
    del next_req_id
    return UpdateConfig(dict(args["changes"])), lambda cfg: cfg.as_dict()


def _simple(command: Command) -> Build:
    """A command without arguments, whose reply's result is null."""

    def build(args: Mapping[str, Any], next_req_id: Callable[[], str]) -> tuple[Command, ResultOf]:
        del args, next_req_id
        return command, lambda _: None

    return build


COMMANDS: dict[str, Build] = {
    CommandKind.ADD_REQUEST.value: _add_one,
    CommandKind.ADD_REQUESTS.value: _add_many,
    CommandKind.ABORT.value: _abort,
    CommandKind.UPDATE_CONFIG.value: _update_config,
    CommandKind.PAUSE.value: _simple(Pause()),
    CommandKind.RESUME.value: _simple(Resume()),
    CommandKind.STEP.value: _simple(Step(1)),
}
"""Each engine command a control message may name: its arguments (and a request id
maker) to the command and how its result becomes JSON."""


def to_command(
    kind: object, args: Mapping[str, Any], next_req_id: Callable[[], str]
) -> tuple[Command, ResultOf]:
    """The engine command for a control message, and how to turn its result into JSON.
    Raises UnknownCommand, or KeyError/ValueError/TypeError for malformed arguments."""
    build = COMMANDS.get(kind) if isinstance(kind, str) else None
    if build is None:
        raise UnknownCommand(f"unknown command {kind!r}")
    return build(args, next_req_id)


PAUSED_AFTER = {
    CommandKind.PAUSE.value: True,
    CommandKind.RESUME.value: False,
    CommandKind.STEP.value: True,
}
"""The `session` state mark a producer publishes after these commands."""


def error_detail(exc: BaseException) -> str:
    """A refused command's reply detail (a ConfigError names its field)."""
    field = getattr(exc, "field", None)
    return f"{field}: {getattr(exc, 'message', exc)}" if field else str(exc)
