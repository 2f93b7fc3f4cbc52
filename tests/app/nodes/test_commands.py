"""Control commands to engine commands: every CommandKind is answered in exactly one place
(the engine's table or the engine host's own), and a kind no table holds is refused."""

from __future__ import annotations

from typing import Any

import pytest

from app.nodes.commands import COMMANDS, PAUSED_AFTER, UnknownCommand, to_command
from app.nodes.engine_host import SESSION_COMMANDS
from engine.commands import Abort, AddRequest, AddRequests, Pause, Step
from protocol.codes import CommandKind


def test_every_command_kind_has_one_handler() -> None:
    assert set(COMMANDS) | set(SESSION_COMMANDS) == {k.value for k in CommandKind}
    assert not set(COMMANDS) & set(SESSION_COMMANDS)
    assert set(PAUSED_AFTER) <= set(COMMANDS)


def test_commands_build_the_engine_command_and_its_result() -> None:
    ids = iter(["a", "b", "c"])
    command, result_of = to_command(
        CommandKind.ADD_REQUEST, {"prompt_token_ids": [1, 2], "max_tokens": 3}, lambda: next(ids)
    )
    assert isinstance(command, AddRequest) and command.req_id == "a"
    assert result_of(None) == {"req_id": "a", "rejected": None}
    item = {"prompt_token_ids": [5], "max_tokens": 1}
    many, result_of = to_command("add_requests", {"items": [item, item]}, lambda: next(ids))
    assert isinstance(many, AddRequests) and [c.req_id for c in many.items] == ["b", "c"]
    assert result_of([None, "too long"]) == [
        {"req_id": "b", "rejected": None},
        {"req_id": "c", "rejected": "too long"},
    ]
    abort, result_of = to_command("abort", {"req_id": "b"}, lambda: "unused")
    assert abort == Abort(("b",)) and result_of(("b",)) == ["b"]
    pause, result_of = to_command("pause", {}, lambda: "unused")
    assert pause == Pause() and result_of(None) is None
    assert to_command("step", {}, lambda: "unused")[0] == Step(1)


@pytest.mark.parametrize("kind", ["launch", None, ["pause"], {"kind": "pause"}, "workload"])
def test_a_kind_no_table_holds_is_refused(kind: Any) -> None:
    # workload, load_scenario and new_session are the engine host's, never the engine's.
    with pytest.raises(UnknownCommand, match="unknown command"):
        to_command(kind, {}, lambda: "unused")
