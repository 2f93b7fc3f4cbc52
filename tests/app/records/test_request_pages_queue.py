"""A seek of a recording's request table to a step with a long waiting queue: the
requests never scheduled by then are left out of the stored live rows (app.db.live_rows)
and read from the requests table, yet every page, filter and sort gives exactly the rows
of an independent fold that keeps every row, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import queries
from app.db.live_rows import PENDING_APART
from app.db.models import LiveRowsRecord
from app.live.hub import EventHub
from app.records.recorder import Recorder
from app.request_table import clear_live_cache, live_rows_at, parse_query, select_rows
from engine.engine import Engine
from engine.request import SamplingParams
from engine.runner.sim import SimRunner
from tests.app.records.conftest import NewUrl, open_sessions
from tests.app.records.helpers import HubPublisher, busy_config, fold_at_steps, open_sim_session
from tests.app.records.test_request_pages import KEYS
from tests.conftest import TOKEN, start_server

SID = "s-pages-queue"
QUERIES = [
    {},
    {"sort": "-arrival"},
    {"sort": "ttft"},
    {"sort": "-e2e"},
    {"sort": "preemptions"},
    {"sort": "-preemptions"},
    {"status": "waiting"},
    {"status": "running,preempted"},
    {"status": "waiting,finished", "sort": "-ttft"},
    {"reason": "policy_order"},
    {"reason": "kv_blocks"},
    {"reason": "token_budget"},
    {"preempted": "no", "prefix_hit": "no"},
    {"priority": "2", "sort": "e2e"},
    {"q": "q1"},
]


def _record(sessions: sessionmaker[Session]) -> None:
    """A burst far beyond what the engine serves (8 seqs, a small KV pool: preemptions),
    then a trickle: the waiting queue holds hundreds for most of the run."""
    rng = random.Random(7)
    hub = EventHub()
    recorder = Recorder(hub, sessions)
    config = busy_config()
    runner = SimRunner()
    open_sim_session(hub, SID, "long queue", config, runner)
    engine = Engine(config, runner, HubPublisher(hub, SID))
    shared = [rng.randint(3, 258) for _ in range(24)]
    n = 0
    for i in range(700):
        for _ in range(60 if i < 10 else (1 if rng.random() < 0.3 else 0)):
            prompt = shared[: rng.choice([0, 24])] + [rng.randint(3, 258) for _ in range(30)]
            engine.add_request(f"q{n}", prompt, SamplingParams(max_tokens=rng.randint(1, 30)),
                               priority=rng.randint(0, 2))  # fmt: skip
            n += 1
        if i == 50:
            engine.abort(["q590"])  # never scheduled by then: ends while waiting
        engine.step()
    hub.close_session(SID)
    asyncio.run(recorder.flush())
    assert recorder.failures == 0, recorder.last_error


@pytest.fixture(scope="module")
def recording(new_database: NewUrl) -> Iterator[tuple[sessionmaker[Session], dict[int, Any]]]:
    for sessions in open_sessions(new_database()):
        _record(sessions)
        with sessions() as db:
            last = queries.get_session(db, SID)["steps"] - 1
            steps = [12, 60, 150, 300, last]
            states: dict[int, Any] = {}
            for step, state in fold_at_steps(db, SID, steps):
                states[step] = state.request_rows()
        yield sessions, states


def _cut(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The compared keys. A request aborted while waiting keeps its last waiting reason in
    the fold; the database's done rows have none (done requests do not wait)."""
    keys = (*KEYS, "waiting_text", "num_tokens")
    done = ("FINISHED", "REJECTED")
    return [
        {k: None if r["status"] in done and k.startswith("waiting") else r.get(k) for k in keys}
        for r in rows
    ]


def _check_pages(
    sessions: sessionmaker[Session], states: dict[int, Any], queries: list[dict[str, str]]
) -> None:
    """Every page of `queries` at every step of `states`, from a real server, equals the
    independent fold's."""
    url = str(sessions.kw["bind"].url.render_as_string(hide_password=False))
    live, server, thread = start_server(database_url=url)
    try:
        with httpx.Client(base_url=live.url, timeout=60,
                          headers={"Authorization": f"Bearer {TOKEN}"}) as c:  # fmt: skip
            for step, rows in states.items():
                for params in queries:
                    want = select_rows(rows, parse_query(params))
                    for offset, limit in ((0, None), (0, 50), (len(want) // 2, 40),
                                          (max(0, len(want) - 7), 50)):  # fmt: skip
                        query = {**params, "step": step, "offset": offset}
                        if limit is not None:
                            query["limit"] = limit
                        got = c.get(f"/api/sessions/{SID}/requests", params=query)
                        assert got.status_code == 200, got.text
                        assert int(got.headers["x-total-count"]) == len(want), (step, params)
                        end = None if limit is None else offset + limit
                        assert _cut(got.json()) == _cut(want[offset:end]), (step, params, offset)
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_long_waiting_queue_is_paged_from_the_requests_table(
    recording: tuple[sessionmaker[Session], dict[int, Any]],
) -> None:
    sessions, states = recording
    # The queue is long at the steps looked at, and the stored live rows leave it out.
    with sessions() as db:
        stored = set(db.scalars(select(LiveRowsRecord.seq).where(LiveRowsRecord.session_id == SID)))
        between = 0  # steps with no live rows of their own: folded on from earlier ones
        for step in (12, 60, 150):
            waiting = sum(1 for r in states[step] if r["status"] == "WAITING")
            assert waiting >= PENDING_APART
            at = live_rows_at(db, SID, step)
            assert at.pending is not None, step
            assert len(at.rows) < waiting
            between += at.seq not in stored
        assert between > 0
    _check_pages(sessions, states, QUERIES)


def test_a_recording_without_live_rows_folds_its_checkpoints(
    recording: tuple[sessionmaker[Session], dict[int, Any]],
) -> None:
    """Recordings made before live rows (or by a writer that joined a session late):
    the table at a step comes from the whole fold, with the same rows."""
    sessions, states = recording
    with sessions.begin() as db:
        db.execute(delete(LiveRowsRecord).where(LiveRowsRecord.session_id == SID))
    clear_live_cache()
    with sessions() as db:
        assert live_rows_at(db, SID, 60).pending is None
    _check_pages(sessions, states, [*QUERIES[:3], {"status": "waiting"}])
