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

ResultOf = Callable[[Any], Any]
"""Turns what the engine answered into the reply's JSON `result`."""


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


def to_command(
    kind: object, args: Mapping[str, Any], next_req_id: Callable[[], str]
) -> tuple[Command, ResultOf]:
    """The engine command for a control message, and how to turn its result into JSON.
    Raises UnknownCommand, or KeyError/ValueError/TypeError for malformed arguments."""
    if kind == "add_request":
        req_id = next_req_id()
        return _add_request(args, req_id), lambda reason: {"req_id": req_id, "rejected": reason}
    if kind == "add_requests":
        items = tuple(_add_request(item, next_req_id()) for item in args["items"])
        return AddRequests(items), lambda reasons: [
            {"req_id": c.req_id, "rejected": r} for c, r in zip(items, reasons, strict=True)
        ]
    if kind == "abort":
        return Abort((str(args["req_id"]),)), lambda ids: list(ids)
    if kind == "update_config":
        return UpdateConfig(dict(args["changes"])), lambda cfg: cfg.as_dict()
    simple: dict[str, Command] = {"pause": Pause(), "resume": Resume(), "step": Step(1)}
    if kind in simple:
        return simple[str(kind)], lambda _: None
    raise UnknownCommand(f"unknown command {kind!r}")


PAUSED_AFTER = {"pause": True, "resume": False, "step": True}
"""The `session` state mark a producer publishes after these commands."""


def error_detail(exc: BaseException) -> str:
    """A refused command's reply detail (a ConfigError names its field)."""
    field = getattr(exc, "field", None)
    return f"{field}: {getattr(exc, 'message', exc)}" if field else str(exc)
