"""One frame the database refuses must never stop recording: it is set aside alone,
reported, and every other frame of every session is written (writer process, both
backends). A database that is away is retried, not quarantined."""

from __future__ import annotations

import asyncio

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db.models import EventRecord, IterationRecord
from app.db.quarantine import Rejected
from app.live.hub import EventHub
from app.records.recorder import Recorder
from engine.engine import Engine
from engine.request import SamplingParams
from engine.runner.sim import SimRunner
from tests.app.records.helpers import HubPublisher, busy_config


def _steps(hub: EventHub, session: str, engine: Engine | None, steps: int) -> Engine:
    engine = engine or Engine(busy_config(), SimRunner(), HubPublisher(hub, session))
    for i in range(steps):
        if i % 4 == 0:
            engine.add_request(f"r{engine.step_index}", [7] * 30, SamplingParams(max_tokens=20))
        engine.step()
    return engine


def _count(sessions: sessionmaker[Session], session: str) -> int:
    with sessions() as db:
        return sum(
            db.scalar(select(func.count()).select_from(t).where(t.session_id == session)) or 0
            for t in (IterationRecord, EventRecord)
        )


def test_a_poison_frame_is_set_aside_and_nothing_else_is_held_back(
    database_url: str, sessions: sessionmaker[Session]
) -> None:
    async def scenario() -> tuple[Recorder, EventHub, list[Rejected]]:
        hub = EventHub()
        recorder = Recorder(hub, sessions, database_url=database_url)
        told: list[Rejected] = []
        recorder.on_rejected.append(told.append)
        recorder.start()
        for sid in ("s-good", "s-bad"):
            hub.open_session(sid, {"name": sid, "config": {}}, live=False)
        good = _steps(hub, "s-good", None, 100)
        bad = _steps(hub, "s-bad", None, 100)
        # What no validation let through here: a step recorded twice (unique key), an
        # integer no column holds, a frame whose data is not an object.
        last = hub.sessions["s-bad"].fold.history[-1]
        frame = {"step": last["step"], "t_start": 1.0, "duration": 0.0, "forward_ms": 0.0}
        frame |= {"overhead_us": 0.0, "simulated": True, "scheduled": [], "new": []}
        frame |= {"resumed": [], "preempted": [], "finished": [], "arrived": [], "rejected": []}
        frame |= {"sampled": [], "queues": {"running": 0, "waiting": 0, "running_end": 0}}
        frame["queues"]["waiting_end"] = 0
        frame |= {"budget": {"max_tokens": 1, "used": 0, "max_seqs": 1, "prefill": 0}}
        frame["budget"]["decode"] = 0
        frame |= {"kv": {"total": 1, "used": 0, "cached_free": 0, "hit_tokens": 0, "used_end": 0}}
        frame |= {"blocks": [], "waiting_reasons": {}, "config_version": 0}
        recorder.on_frame("s-bad", "iteration", 100_000, {}, _envelope("s-bad", 100_000, frame))
        huge = {"req": "x", "kind": "arrived", "step": 2**70, "t": 0.0, "detail": {}}
        recorder.on_frame("s-bad", "request", 100_001, {}, _envelope("s-bad", 100_001, huge))
        recorder.on_frame("s-bad", "request", 100_002, {}, '{"data": [1]}')
        _steps(hub, "s-good", good, 50)
        _steps(hub, "s-bad", bad, 50)
        await recorder.flush()
        _steps(hub, "s-good", good, 20)
        await recorder.stop()
        return recorder, hub, told

    recorder, hub, told = asyncio.run(scenario())
    assert {r.seq for r in told} == {100_000, 100_001, 100_002}
    assert all(r.session == "s-bad" for r in told) and recorder.num_rejected == 3
    assert recorder.lag == 0 and recorder.consecutive_failures == 0
    for sid in ("s-good", "s-bad"):
        assert _count(sessions, sid) == hub.sessions[sid].fold.seq, sid
    assert recorder.status()["ok"] and recorder.status()["rejected"] == 3


def _envelope(session: str, seq: int, data: dict[str, object]) -> str:
    import json

    return json.dumps({"v": 1, "type": "x", "session": session, "seq": seq, "data": data})


def test_a_database_that_is_away_is_retried_not_quarantined(tmp_path: object) -> None:
    from pathlib import Path

    from app.db.migrate import upgrade
    from app.db.session import make_engine, make_sessionmaker

    url = f"sqlite:///{Path(str(tmp_path)) / 'away.db'}"
    upgrade(url)
    engine = make_engine(url)
    sessions = make_sessionmaker(engine)

    async def scenario() -> Recorder:
        hub = EventHub()
        recorder = Recorder(hub, sessions)
        hub.open_session("s-away", {"name": "away", "config": {}}, live=False)
        engine_ = _steps(hub, "s-away", None, 50)
        lock = make_engine(url).raw_connection()
        lock.execute("BEGIN EXCLUSIVE")  # another process holds the database
        flush = asyncio.create_task(recorder.flush())
        await asyncio.sleep(6.0)  # past SQLite's busy timeout: the write fails
        assert recorder.failures >= 1 and recorder.lag > 0 and not recorder.healthy()
        lock.rollback()
        lock.close()
        await flush
        _steps(hub, "s-away", engine_, 10)
        await recorder.stop()
        return recorder

    recorder = asyncio.run(scenario())
    assert recorder.num_rejected == 0 and recorder.lag == 0
    assert _count(sessions, "s-away") == recorder.written
    engine.dispose()
