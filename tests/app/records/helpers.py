"""Make real recordings without a server: the engine's events go through event_to_frame and
hub.publish in the same thread, and a Recorder listening on the hub writes them. Read back
what a recording holds. bench/ shares these too."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import models, queries
from app.db.session import make_engine, make_sessionmaker
from app.frames.convert import event_to_frame
from app.frames.fold import SessionState
from app.frames.row_index import RowIndex
from app.live.hub import EventHub
from app.records.recorder import Recorder
from engine.config import CacheConfig, EngineConfig, SchedulerConfig
from engine.engine import Engine
from engine.events import Event
from engine.request import SamplingParams
from engine.runner.sim import SimRunner
from protocol.views import RequestRow

TABLES = (
    models.SessionRecord,
    models.IterationRecord,
    models.EventRecord,
    models.RequestRecord,
    models.ConfigChangeRecord,
    models.CheckpointRecord,
)


class HubPublisher:
    """EventSink that publishes straight into the hub (no thread hop)."""

    def __init__(self, hub: EventHub, session: str) -> None:
        self.hub = hub
        self.session = session

    def emit(self, event: Event) -> None:
        frame_type, data = event_to_frame(event)
        self.hub.publish(self.session, frame_type, data)


def open_sim_session(
    hub: EventHub, session: str, name: str, config: EngineConfig, runner: SimRunner
) -> None:
    """Open `session` in the hub as the local engine does, for `runner` under `config`."""
    hub.open_session(
        session,
        {
            "name": name,
            "source": "local",
            "runner": runner.name,
            "simulated": True,
            "describe": runner.describe(),
            "config": config.as_dict(),
            "started_at": time.time(),
        },
    )


def busy_config() -> EngineConfig:
    """Small budget and KV pool: chunked prefills, preemptions and prefix hits happen."""
    return EngineConfig(
        SchedulerConfig(max_num_batched_tokens=96, max_num_seqs=8, max_model_len=512),
        CacheConfig(block_size=8, num_gpu_blocks=48),
    ).validate()


def start_recording(
    sessions: sessionmaker[Session],
    session: str,
    name: str = "records test",
    config: EngineConfig | None = None,
) -> tuple[EventHub, Recorder, Engine]:
    """A sim engine under `config` (default busy_config) whose session a real Recorder
    records."""
    hub = EventHub()
    recorder = Recorder(hub, sessions)
    config = config or busy_config()
    runner = SimRunner()
    open_sim_session(hub, session, name, config, runner)
    return hub, recorder, Engine(config, runner, HubPublisher(hub, session))


def drive(engine: Engine, steps: int, rng: random.Random, first: int = 0) -> None:
    """`steps` steps numbered from `first`: arrivals, a config change, an abort, a
    rejection (request ids from the step numbers: drive on with `first` past the last)."""
    shared = [rng.randint(3, 258) for _ in range(24)]
    for i in range(first, first + steps):
        if rng.random() < 0.3:
            prompt = shared + [rng.randint(3, 258) for _ in range(rng.randint(1, 120))]
            engine.add_request(
                f"r{i}",
                prompt,
                SamplingParams(max_tokens=rng.randint(1, 40)),
                priority=rng.randint(0, 2),
            )
        if i == first + 5:
            too_long = "too-long" if first == 0 else f"too-long-{first}"
            engine.add_request(too_long, [5] * 600, SamplingParams(max_tokens=4))
        if i == first + steps // 3:
            engine.update_config(max_num_batched_tokens=64)
        if i == first + steps // 2 and engine.scheduler.running:
            engine.abort([engine.scheduler.running[0].request_id])
        engine.step()


def settle(recorder: Recorder) -> None:
    """Every frame published so far is written."""
    asyncio.run(recorder.flush())
    assert recorder.lag == 0 and recorder.failures == 0, recorder.last_error


def record_session(
    sessions: sessionmaker[Session],
    session: str,
    steps: int = 300,
    seed: int = 0,
    name: str = "records test",
    close: bool = True,
) -> EventHub:
    """Record `steps` engine steps (arrivals, a config change, an abort, a rejection);
    the session is closed unless `close` is False (a recording still being made)."""
    hub, recorder, engine = start_recording(sessions, session, name)
    drive(engine, steps, random.Random(seed))
    if close:
        hub.close_session(session)
    settle(recorder)
    return hub


def recorded(url: str, session: str) -> tuple[list[int], models.SessionRecord | None]:
    """The seqs a session's recording holds (iterations and events, sorted) and its row."""
    engine = make_engine(url)
    try:
        with make_sessionmaker(engine)() as db:
            seqs = list(
                db.scalars(
                    select(models.IterationRecord.seq).where(
                        models.IterationRecord.session_id == session
                    )
                )
            )
            seqs += db.scalars(
                select(models.EventRecord.seq).where(models.EventRecord.session_id == session)
            )
            return sorted(seqs), db.get(models.SessionRecord, session)
    finally:
        engine.dispose()


def row_counts(sessions: sessionmaker[Session]) -> dict[str, int]:
    with sessions() as db:
        return {
            t.__tablename__: db.scalar(select(func.count()).select_from(t)) or 0 for t in TABLES
        }


class _KeepingIndex(RowIndex):
    def retire(self, req: str, requests: MutableMapping[str, RequestRow]) -> None:
        self.ended(req)


class FullState(SessionState):
    """The fold keeping every finished row (what a recording's request pages must equal)."""

    def __init__(self, session: str, meta: Mapping[str, Any] | None = None) -> None:
        super().__init__(session, meta)
        self.index = _KeepingIndex()


def fold_at_steps(db: Session, sid: str, steps: Iterable[int]) -> Iterator[tuple[int, FullState]]:
    """An independent fold of recording `sid` keeping every row, yielded (step, the fold)
    at the end of each of `steps` (the same state object, folded on afterwards)."""
    state = FullState(sid, {})
    marks = {queries.last_seq_at_step(db, sid, s): s for s in steps}
    for seq, text in queries.iter_frames(db, sid):
        frame = json.loads(text)
        state.apply(frame["type"], seq, frame["data"])
        if seq in marks:
            yield marks[seq], state
