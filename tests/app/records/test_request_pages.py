"""GET /api/sessions/{id}/requests on recordings with more finished requests than the
fold keeps (MAX_DONE_ROWS): every request is there at every step, filtered, sorted and
paged (offset, limit, X-Total-Count) exactly as an independent fold that keeps every row
gives them, on SQLite and PostgreSQL, from a real server on loopback; of an ended
recording, and of one still being made (its done counts go through the step before its
last, the rows of the last are counted in the database)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import done_counts, queries
from app.db.models import RequestRecord as R
from app.frames.row_index import MAX_DONE_ROWS
from app.request_table import parse_query, select_rows
from tests.app.records.conftest import NewUrl, open_sessions
from tests.app.records.helpers import fold_at_steps, record_session
from tests.conftest import TOKEN, start_server

SID = "s-pages-1"
KEYS = ("req", "status", "num_prompt_tokens", "max_tokens", "priority", "num_preemptions",
        "prefix_hit", "ttft", "e2e", "finish_reason", "num_output_tokens", "waiting_reason",
        "phase")  # fmt: skip
QUERIES = [
    {},
    {"sort": "-arrival"},
    {"sort": "ttft"},
    {"sort": "-e2e"},
    {"sort": "-preemptions"},
    {"status": "finished"},
    {"status": "running,waiting,preempted"},
    {"status": "rejected,finished", "sort": "e2e"},
    {"preempted": "yes"},
    {"prefix_hit": "no", "priority": "1"},
    {"q": "r1"},
]


@pytest.fixture(scope="module", params=["ended", "being made"])
def recording(
    new_database: NewUrl, request: pytest.FixtureRequest
) -> Iterator[tuple[sessionmaker[Session], dict[int, Any]]]:
    ended = request.param == "ended"
    for sessions in open_sessions(new_database()):
        # Being made: 4007 steps, so that a request finishes at the last step (past the
        # done counts' last step: counted in the database).
        record_session(sessions, SID, steps=4000 if ended else 4007, seed=4, close=ended)
        with sessions() as db:
            last = queries.get_session(db, SID)["steps"] - 1
            at_last = select(func.count()).where(R.session_id == SID, R.finish_step == last)
            assert ended or db.scalar(at_last)
            steps = [40, last // 3, last // 2, last]
            states: dict[int, Any] = {}
            for step, state in fold_at_steps(db, SID, steps):
                states[step] = state.request_rows()
        yield sessions, states


def _counted(sid: str) -> bool:
    """Done counts of `sid` being made are kept in this process (the server's)."""
    return any(
        k[1] == sid and isinstance(k[2], tuple) and k[2][1:] == ("being made",)
        for k in done_counts._kept
    )


def _cut(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: r.get(k) for k in KEYS} for r in rows]


def test_every_request_at_every_step_paged_in_the_database(
    recording: tuple[sessionmaker[Session], dict[int, Any]],
) -> None:
    sessions, states = recording
    url = str(sessions.kw["bind"].url.render_as_string(hide_password=False))
    last = max(states)
    done = sum(1 for r in states[last] if r["status"] in ("FINISHED", "REJECTED"))
    assert done > MAX_DONE_ROWS  # more than the fold alone keeps
    with sessions() as db:
        being_made = queries.get_session(db, SID)["ended_at"] is None
    live, server, thread = start_server(database_url=url)
    try:
        with httpx.Client(base_url=live.url, timeout=60,
                          headers={"Authorization": f"Bearer {TOKEN}"}) as c:  # fmt: skip
            if being_made:  # its done counts read (apart) before the pages
                assert c.get(f"/api/sessions/{SID}/requests").status_code == 200
                deadline = time.monotonic() + 60
                while not _counted(SID) and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert _counted(SID), "the done counts were not read within 60 s"
            for step, rows in states.items():
                for params in QUERIES:
                    want = select_rows(rows, parse_query(params))
                    got = c.get(f"/api/sessions/{SID}/requests", params={**params, "step": step})
                    assert got.status_code == 200, got.text
                    assert int(got.headers["x-total-count"]) == len(want)
                    assert _cut(got.json()) == _cut(want), (step, params)
                    for offset, limit in (
                        (0, 50),
                        (37, 25),
                        (len(want) // 2, 50),
                        (max(0, len(want) - 10), 50),
                        (len(want) + 5, 10),
                    ):
                        page = c.get(f"/api/sessions/{SID}/requests", params={
                            **params, "step": step, "offset": offset, "limit": limit})  # fmt: skip
                        assert int(page.headers["x-total-count"]) == len(want)
                        assert _cut(page.json()) == _cut(want[offset : offset + limit]), (
                            step, params, offset)  # fmt: skip
            bad = c.get(f"/api/sessions/{SID}/requests", params={"limit": -1})
            assert bad.status_code == 422
            assert c.get("/api/sessions/s-nope/requests").status_code == 404
    finally:
        server.should_exit = True
        thread.join(10)
