"""Retention on both backends: `batchscope sessions prune --older-than` and `--max-size`
delete ended recordings (oldest first), never an open one, and say what they freed."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from app.cli.main import main
from app.db import queries
from app.db.models import SessionRecord
from app.db.retention import stored_bytes
from tests.app.records.helpers import record_session


def _url(sessions: sessionmaker[Session]) -> str:
    return str(sessions.kw["bind"].url.render_as_string(hide_password=False))


def test_prune_by_age_and_by_size(
    sessions: sessionmaker[Session], capsys: pytest.CaptureFixture[str]
) -> None:
    for i, sid in enumerate(("s-old-1", "s-old-2", "s-new-1", "s-new-2")):
        record_session(sessions, sid, steps=120, seed=i)
    with sessions.begin() as db:
        day = 86400
        db.execute(
            update(SessionRecord)
            .where(SessionRecord.id == "s-old-1")
            .values(started_at=time.time() - 40 * day)
        )
        db.execute(
            update(SessionRecord)
            .where(SessionRecord.id == "s-old-2")
            .values(started_at=time.time() - 31 * day)
        )
        db.execute(update(SessionRecord).where(SessionRecord.id == "s-new-2").values(ended_at=None))
    url = _url(sessions)
    assert (
        main(["sessions", "prune", "--older-than", "30d", "--dry-run", "--database-url", url]) == 0
    )
    assert "would delete 2 ended sessions" in capsys.readouterr().out
    assert main(["sessions", "prune", "--older-than", "30d", "--database-url", url]) == 0
    out = capsys.readouterr().out
    assert "deleted 2 ended sessions" in out and "s-old-1" in out and "s-old-2" in out
    with sessions() as db:
        assert {r["id"] for r in queries.list_sessions(db)} == {"s-new-1", "s-new-2"}
        sizes = stored_bytes(db)
    assert main(["sessions", "prune", "--max-size", "1KB", "--database-url", url]) == 0
    with sessions() as db:  # the open session stays, whatever the cap
        assert {r["id"] for r in queries.list_sessions(db)} == {"s-new-2"}
        assert stored_bytes(db) == {"s-new-2": sizes["s-new-2"]}


def test_prune_refuses_unclear_requests(
    sessions: sessionmaker[Session], capsys: pytest.CaptureFixture[str]
) -> None:
    url = _url(sessions)
    assert main(["sessions", "prune", "--database-url", url]) == 2
    assert "needs --older-than" in capsys.readouterr().err
    for bad in (["--older-than", "soon"], ["--max-size", "lots"]):
        with pytest.raises(SystemExit) as info:
            main(["sessions", "prune", *bad, "--database-url", url])
        assert info.value.code == 2
    assert main(["sessions", "--older-than", "1d", "--database-url", url]) == 2
