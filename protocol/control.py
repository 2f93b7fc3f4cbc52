"""The control messages beside the frames (docs/protocol.md), typed, and their builders.

A producer (a node pushing to /ws/ingest, the dashboard's engine process on its link)
opens with `announce` and is answered `welcome` (or `error`); it sends `stats` now and
then; the dashboard sends it `command`s and it answers each with a `reply`. The engine
link also acks frames (`ack`). Each message is one JSON object with its `type`
(codes.MessageType). Every builder returns a plain dict: nothing to convert before
encoding.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from protocol.codes import MessageType


class _AnnounceBase(TypedDict):
    type: Literal[MessageType.ANNOUNCE]
    session: str | None
    """The session the producer streams (None: the dashboard names one)."""
    node: str


class Announce(_AnnounceBase, total=False):
    """A producer's first message. A node adds what its sessions' metadata says (`name`,
    `engine`, `model`, ...); the engine link adds `meta`, `workload`, `scenario` and
    `tokenizer`."""

    resume_key: str


class _WelcomeBase(TypedDict):
    type: Literal[MessageType.WELCOME]
    session: str
    last_seq: int
    """The producer resumes after this seq (0: from the start)."""


class Welcome(_WelcomeBase, total=False):
    resume_key: str
    """The secret that lets this producer resume its session after a reconnect."""


class _StatsBase(TypedDict):
    type: Literal[MessageType.STATS]
    buffered: int
    dropped: int


class Stats(_StatsBase, total=False):
    observer_errors: int
    degraded: dict[str, int]
    """A vLLM node's observations skipped for a missing vLLM attribute: name -> count."""
    step: int


class Command(TypedDict):
    type: Literal[MessageType.COMMAND]
    id: int
    kind: str
    args: dict[str, Any]


class _ReplyBase(TypedDict):
    type: Literal[MessageType.REPLY]
    id: Any
    ok: bool


class Reply(_ReplyBase, total=False):
    result: Any
    """When ok."""
    detail: str
    """When not ok: why."""


class _ErrorBase(TypedDict):
    type: Literal[MessageType.ERROR]
    detail: str


class Error(_ErrorBase, total=False):
    seq: int
    """The frame it refers to, if one."""


class Ack(TypedDict):
    type: Literal[MessageType.ACK]
    session: str | None
    seq: int


def announce(session: str | None, node: str) -> Announce:
    return {"type": MessageType.ANNOUNCE, "session": session, "node": node}


def welcome(session: str, last_seq: int, resume_key: str | None) -> Welcome:
    out: Welcome = {"type": MessageType.WELCOME, "session": session, "last_seq": last_seq}
    if resume_key is not None:
        out["resume_key"] = resume_key
    return out


def stats(buffered: int, dropped: int) -> Stats:
    return {"type": MessageType.STATS, "buffered": buffered, "dropped": dropped}


def command(cid: int, kind: str, args: dict[str, Any]) -> Command:
    return {"type": MessageType.COMMAND, "id": cid, "kind": kind, "args": args}


def reply_ok(cid: Any, result: Any) -> Reply:
    return {"type": MessageType.REPLY, "id": cid, "ok": True, "result": result}


def reply_error(cid: Any, detail: str) -> Reply:
    return {"type": MessageType.REPLY, "id": cid, "ok": False, "detail": detail}


def error(detail: str, seq: int | None = None) -> Error:
    out: Error = {"type": MessageType.ERROR, "detail": detail}
    if seq is not None:
        out["seq"] = seq
    return out


def ack(session: str | None, seq: int) -> Ack:
    return {"type": MessageType.ACK, "session": session, "seq": seq}
