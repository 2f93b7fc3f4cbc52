"""GET /api/sessions/{id}/requests?segments=1 on a recording with more finished requests
than the fold keeps (MAX_DONE_ROWS): every row of every page carries the Gantt segments a
fold keeping every row has at the step (stored by the writer when each request ended;
rebuilt from the frames for rows without them), on SQLite and PostgreSQL, from a real
server on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import null, select, update
from sqlalchemy.orm import Session, sessionmaker

from app.db import queries
from app.db.models import RequestRecord
from app.db.request_segments import closed
from app.frames.row_index import MAX_DONE_ROWS
from app.records.export import export_jsonl
from app.records.importer import import_jsonl
from app.request_table import clear_live_cache
from tests.app.records.conftest import NewUrl, open_sessions
from tests.app.records.helpers import fold_at_steps, record_session
from tests.conftest import TOKEN, start_server

SID = "s-segments-1"
FINISHED, REJECTED = "FINISHED", "REJECTED"


Want = dict[int, dict[str, list[Any]]]


@pytest.fixture(scope="module")
def recording(new_database: NewUrl) -> Iterator[tuple[sessionmaker[Session], Want]]:
    for sessions in open_sessions(new_database()):
        record_session(sessions, SID, steps=4000, seed=4)
        with sessions() as db:
            last = queries.get_session(db, SID)["steps"] - 1
            steps = [last // 2, last]
            want: Want = {}
            for step, state in fold_at_steps(db, SID, steps):
                want[step] = {
                    req: closed(row["segments"], step) for req, row in state.requests.items()
                }
        yield sessions, want


def _all_pages(c: httpx.Client, step: int, params: dict[str, str], limit: int) -> list[Any]:
    rows: list[Any] = []
    while True:
        page = {"step": step, "offset": len(rows), "limit": limit, "segments": 1}
        got = c.get(f"/api/sessions/{SID}/requests", params={**params, **page})
        assert got.status_code == 200, got.text
        rows += got.json()
        if len(rows) >= int(got.headers["x-total-count"]):
            return rows


def test_every_request_has_its_segments_on_its_page(
    recording: tuple[sessionmaker[Session], Want],
) -> None:
    sessions, want = recording
    url = str(sessions.kw["bind"].url.render_as_string(hide_password=False))
    last = max(want)
    with sessions() as db:
        done = db.scalar(
            select(RequestRecord.req_id)
            .where(RequestRecord.session_id == SID, RequestRecord.segments.is_(None))
            .where(RequestRecord.finish_step.is_not(None))
            .limit(1)
        )
        assert done is None  # the writer stored every done request's segments
    live, server, thread = start_server(database_url=url)
    try:
        with httpx.Client(base_url=live.url, timeout=120,
                          headers={"Authorization": f"Bearer {TOKEN}"}) as c:  # fmt: skip
            for step, segs in want.items():
                for params in ({}, {"sort": "-e2e"}):
                    rows = _all_pages(c, step, params, 400)
                    assert len(rows) == len(segs)
                    finished = sum(1 for r in rows if r["status"] in (FINISHED, REJECTED))
                    if step == last:
                        assert finished > MAX_DONE_ROWS  # more than the fold alone keeps
                    for r in rows:
                        assert r["segments"] == segs[r["req"]], (step, r["req"])
            plain = c.get(f"/api/sessions/{SID}/requests", params={"limit": 5})
            assert all("segments" not in r for r in plain.json())
            # A recording without stored segments (before 0009): rebuilt from the frames.
            with sessions.begin() as db:
                db.execute(
                    update(RequestRecord)
                    .where(RequestRecord.session_id == SID)
                    .values(segments=null())
                )
            clear_live_cache()
            for step, segs in want.items():
                for offset in (0, len(segs) // 2, len(segs) - 40):
                    got = c.get(f"/api/sessions/{SID}/requests", params={
                        "step": step, "offset": offset, "limit": 40, "segments": 1})  # fmt: skip
                    rows = got.json()
                    assert rows
                    for r in rows:
                        assert r["segments"] == segs[r["req"]], (step, r["req"], "rebuilt")
    finally:
        server.should_exit = True
        thread.join(10)


def test_an_imported_recording_stores_the_same_segments(
    recording: tuple[sessionmaker[Session], Want], new_database: NewUrl, tmp_path: Path
) -> None:
    """The importer stores each done request's segments, as the recorder does (those of
    the recording itself may have been cleared by the test above)."""
    sessions, want = recording
    path = tmp_path / "s.jsonl"
    with sessions() as db, path.open("w") as out:
        export_jsonl(db, SID, out)
    query = select(RequestRecord.req_id, RequestRecord.segments).where(
        RequestRecord.session_id == SID, RequestRecord.finish_step.is_not(None)
    )
    for other in open_sessions(new_database()):
        assert import_jsonl(other, path) == SID
        with other() as db:
            imported = dict(db.execute(query).all())
    assert len(imported) > MAX_DONE_ROWS
    assert imported == {req: want[max(want)][req] for req in imported}
