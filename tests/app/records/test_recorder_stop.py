"""Stopping the recorder while a batch is being written must not lose or double-write.

Cancelling the flush task would leave its write running in the worker thread while
stop()'s own flush started a second, concurrent write of newer frames (a duplicate session
or request row, and frames left pending at shutdown). stop() must wait for the write.
"""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db.models import EventRecord, IterationRecord
from app.live.hub import EventHub
from app.records.recorder import Recorder
from engine.engine import Engine
from engine.request import SamplingParams
from engine.runner.sim import SimRunner
from tests.app.records.helpers import HubPublisher, busy_config


def _publish_steps(hub: EventHub, session: str, engine: Engine | None, steps: int) -> Engine:
    if engine is None:
        engine = Engine(busy_config(), SimRunner(), HubPublisher(hub, session))
    for i in range(steps):
        if i % 3 == 0:
            engine.add_request(f"r{engine.step_index}", [7] * 40, SamplingParams(max_tokens=30))
        engine.step()
    return engine


def test_stop_during_a_write_keeps_every_frame(sessions: sessionmaker[Session]) -> None:
    async def scenario() -> tuple[int, int, Recorder]:
        hub = EventHub()
        recorder = Recorder(hub, sessions)
        hub.open_session("s-stop", {"name": "stop", "config": {}})
        engine = _publish_steps(hub, "s-stop", None, 1500)
        recorder.start()
        deadline = time.monotonic() + 10
        while not (recorder.writing and recorder.written == 0):  # the first write is running
            assert time.monotonic() < deadline
            await asyncio.sleep(0.001)
        _publish_steps(hub, "s-stop", engine, 50)
        await recorder.stop()
        with sessions() as db:
            stored = sum(
                db.scalar(select(func.count()).select_from(t)) or 0
                for t in (IterationRecord, EventRecord)
            )
        return hub.sessions["s-stop"].fold.seq, stored, recorder

    published, stored, recorder = asyncio.run(scenario())
    assert (recorder.failures, recorder.lag) == (0, 0), recorder.last_error
    assert stored == published
