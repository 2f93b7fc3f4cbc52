"""Malformed import files: a clear error naming the line, and nothing written at all (every
line is checked before the first write, even when only the last line is bad)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.records.export import export_jsonl
from app.records.importer import ImportFormatError, import_jsonl
from tests.app.records.conftest import NewUrl, open_sessions
from tests.app.records.helpers import row_counts

Lines = list[str]


@pytest.fixture(scope="module")
def exported(recorded: tuple[sessionmaker[Session], str]) -> Lines:
    sessions, sid = recorded
    out = io.StringIO()
    with sessions() as db:
        export_jsonl(db, sid, out)
    return out.getvalue().splitlines()


@pytest.fixture(scope="module")
def target(new_database: NewUrl) -> Iterator[sessionmaker[Session]]:
    """An empty database that every failing import must leave empty."""
    yield from open_sessions(new_database())


def _first(lines: Lines, frame_type: str, after: int = 1) -> int:
    """Index of the first line after `after` holding a frame of this type."""
    return next(i for i in range(after, len(lines)) if f'"type":"{frame_type}"' in lines[i])


def _edit(lines: Lines, index: int, change: Callable[[dict[str, object]], None]) -> None:
    frame = json.loads(lines[index])
    change(frame)
    lines[index] = json.dumps(frame, separators=(",", ":"))


def _drop_budget_used(lines: Lines) -> str:
    i = _first(lines, "iteration", after=40)
    _edit(lines, i, lambda f: f["data"]["budget"].pop("used"))  # type: ignore[index,attr-defined]
    return f"line {i + 1}: iteration frame: budget.used: field required"


def _bad_request_kind(lines: Lines) -> str:
    i = _first(lines, "request", after=20)
    _edit(lines, i, lambda f: f["data"].update(kind="teleported"))  # type: ignore[attr-defined]
    return f"line {i + 1}: request frame: kind: input should be "


def _seq_gap(lines: Lines) -> str:
    del lines[30]  # the frame with seq 30; line 31 now holds seq 31
    return "line 31: seq 31 where 30 was expected"


def _wrong_session(lines: Lines) -> str:
    _edit(lines, 12, lambda f: f.update(session="s-someone-else"))
    return "line 13: session 's-someone-else' is not the header's"


def _bad_json(lines: Lines) -> str:
    lines[6] = lines[6][:-3]
    return "line 7: not valid JSON"


def _bad_json_last_line(lines: Lines) -> str:
    lines[-1] = lines[-1].replace(":", "=", 1)
    return f"line {len(lines)}: not valid JSON"


def _missing_header(lines: Lines) -> str:
    del lines[0]
    return "line 1: header: missing"


def _bad_header(lines: Lines) -> str:
    _edit(lines, 0, lambda f: f["session"].update(id=42))  # type: ignore[attr-defined]
    return "line 1: header: session.id: input should be a valid string"


def _snapshot_frame(lines: Lines) -> str:
    _edit(lines, 3, lambda f: f.update(type="snapshot"))
    return "line 4: frame type 'snapshot' (expected one of iteration, request, config, session)"


def _version_two(lines: Lines) -> str:
    _edit(lines, 5, lambda f: f.update(v=2))
    return "line 6: protocol version 2 (expected 1)"


def _blank_line(lines: Lines) -> str:
    lines.insert(9, "")
    return "line 10: empty line"


def _empty_file(lines: Lines) -> str:
    lines.clear()
    return "line 1: header: missing"


CASES = [
    _bad_json,
    _bad_json_last_line,
    _drop_budget_used,
    _bad_request_kind,
    _seq_gap,
    _wrong_session,
    _missing_header,
    _bad_header,
    _snapshot_frame,
    _version_two,
    _blank_line,
    _empty_file,
]


@pytest.mark.parametrize("corrupt", CASES, ids=[c.__name__.strip("_") for c in CASES])
def test_malformed_file_names_the_line_and_writes_nothing(
    corrupt: Callable[[Lines], str],
    exported: Lines,
    target: sessionmaker[Session],
    tmp_path: Path,
) -> None:
    lines = list(exported)
    expected = corrupt(lines)
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    with pytest.raises(ImportFormatError) as info:
        import_jsonl(target, path)
    assert str(info.value).startswith(expected), str(info.value)
    assert set(row_counts(target).values()) == {0}


def test_importing_a_session_that_exists_is_refused(
    recorded: tuple[sessionmaker[Session], str], exported: Lines, tmp_path: Path
) -> None:
    sessions, sid = recorded
    before = row_counts(sessions)
    path = tmp_path / "again.jsonl"
    path.write_text("".join(line + "\n" for line in exported), encoding="utf-8")
    with pytest.raises(ImportFormatError, match=f"session '{sid}' already exists"):
        import_jsonl(sessions, path)
    assert row_counts(sessions) == before
