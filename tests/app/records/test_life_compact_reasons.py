"""A request's life read from a recording of compact waiting reasons (`waiting_default`
and the exceptions) gives each waited step the reason a full map gave it: aborts of
waiting requests between steps and a stop with requests still waiting included."""

from __future__ import annotations

import asyncio

from sqlalchemy.orm import Session, sessionmaker

from app.live.hub import EventHub
from app.records.recorder import Recorder
from app.records.request_life import request_life
from engine.engine import Engine
from engine.events import Event, IterationEvent
from engine.request import SamplingParams
from engine.runner.sim import SimRunner
from engine.waiting import waiting_text
from tests.app.records.helpers import HubPublisher, open_sim_session
from tests.engine.helpers import make_config

SID = "s-compact-life"


class Both(HubPublisher):
    """Publishes the events and keeps the iteration events."""

    def __init__(self, hub: EventHub, session: str) -> None:
        super().__init__(hub, session)
        self.iterations: list[IterationEvent] = []

    def emit(self, event: Event) -> None:
        super().emit(event)
        if isinstance(event, IterationEvent):
            self.iterations.append(event)


def test_lives_of_a_compact_recording_wait_as_full_maps_said(
    sessions: sessionmaker[Session],
) -> None:
    hub = EventHub()
    recorder = Recorder(hub, sessions)
    config = make_config(
        max_num_batched_tokens=32, max_num_seqs=4, num_gpu_blocks=30, max_model_len=128
    )
    runner = SimRunner()
    open_sim_session(hub, SID, "compact reasons", config, runner)
    sink = Both(hub, SID)
    engine = Engine(config, runner, sink)
    sched = engine.scheduler
    waiting_after: dict[int, list[str]] = {}
    n = 0
    for i in range(70):
        if i % 4 == 0:
            for _ in range(4):
                engine.add_request(f"r{n}", [n % 40 + 1] * (10 + n % 17),
                                   SamplingParams(max_tokens=3 + n % 7))  # fmt: skip
                n += 1
        if i % 11 == 10:
            engine.abort([r.request_id for r in list(sched.waiting)[-2:]])
        ev = engine.step()
        waiting_after[ev.step] = [r.request_id for r in sched.waiting]
    stopped_waiting = list(waiting_after[ev.step])
    assert stopped_waiting
    engine.stop()  # the requests still waiting are aborted at the last step
    hub.close_session(SID)
    asyncio.run(recorder.flush())
    assert recorder.failures == 0, recorder.last_error
    expected: dict[str, list[tuple[int, str, str]]] = {}
    for ev in sink.iterations:
        full = ev.waiting_reasons.resolve(waiting_after[ev.step])
        for req, reason in full.items():
            text = waiting_text(req, reason, ev.waiting_detail)
            expected.setdefault(req, []).append((ev.step, reason, text))
    assert sum(len(w) for w in expected.values()) > 300
    with sessions() as db:
        for req, want in expected.items():
            life = request_life(db, SID, req)
            got = [(s, w["reason"], w["text"]) for w in life["waits"]
                   for s in range(w["from"], w["to"] + 1)]  # fmt: skip
            assert got == want, req
        last = sink.iterations[-1].step
        assert all(expected[r][-1][0] == last for r in stopped_waiting)
