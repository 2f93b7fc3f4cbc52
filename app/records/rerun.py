"""Re-run a recording's arrivals through a fresh engine under other knobs.

Arrivals keep their recorded times; the engine runs on a virtual clock that advances by
each step's runner time, so changing a knob (say the chunk size) changes step times and
therefore who is waiting when, exactly as it would live. The result is a new recorded
session (source `rerun`), comparable side by side with the original. The engine runs in
a process of its own (app.records.rerun_process), never in the web process; its frames
stream to the recorder's writer, so memory stays bounded however long the run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.frame_codec import unpack_frame
from app.db.models import EventRecord, SessionRecord
from app.db.queries import SessionRow, get_session
from app.live.hub import EventHub
from app.protocol.convert import event_to_frame
from engine.config import EngineConfig
from engine.engine import Engine
from engine.events import Event, EventSink
from engine.releases import SUPPORTED, ReleaseFeatures, nearest_supported
from engine.request import SamplingParams
from engine.runner import make_runner
from protocol.session import new_session_id
from protocol.wire import SessionMeta

MAX_RERUN_STEPS = 200_000


@dataclass(frozen=True, slots=True)
class Arrival:
    t: float
    req_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    priority: int


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


ARTICLE_RELEASE = "0.20"
"""What our engine decided as before sessions recorded their release."""


def recorded_release(db: Session, session_id: str) -> tuple[str, str]:
    """(the release a re-run of `session_id` decides as, how it was chosen): the one its
    config recorded; a vLLM node's own release (the nearest supported one, said so,
    when it is not supported); else 0.20, all our engine knew before."""
    rec = db.get(SessionRecord, session_id)
    config = dict(rec.config or {}) if rec is not None else {}
    meta = dict(rec.meta or {}) if rec is not None else {}
    if config.get("vllm_version") in SUPPORTED:
        return str(config["vllm_version"]), "as recorded"
    node_release = meta.get("vllm_version")
    if node_release:
        release, exact = nearest_supported(node_release)
        if exact:
            return release, f"the node's vLLM {node_release}"
        return release, f"the node ran vLLM {node_release}: nearest supported release {release}"
    return ARTICLE_RELEASE, "recorded before sessions stated a release: 0.20"


def load_arrivals(db: Session, session_id: str) -> tuple[SessionRow, list[Arrival]]:
    meta = get_session(db, session_id)
    arrivals: list[Arrival] = []
    rows = db.scalars(
        select(EventRecord.frame)
        .where(EventRecord.session_id == session_id, EventRecord.type == "request")
        .order_by(EventRecord.seq)
    )
    for stored in rows:
        data = json.loads(unpack_frame(stored))["data"]
        if data["kind"] != "arrived":
            continue
        d = data["detail"]
        if "prompt_token_ids" not in d:
            continue  # recorded by a producer that did not send prompts: cannot re-run
        params = SamplingParams(
            max_tokens=int(d["max_tokens"]),
            temperature=float(d.get("temperature") or 0.0),
            top_p=float(d.get("top_p") or 1.0),
            seed=d.get("seed"),
        )
        arrivals.append(
            Arrival(
                float(data["t"]),
                data["req"],
                list(d["prompt_token_ids"]),
                params,
                int(d.get("priority", 0)),
            )
        )
    return meta, arrivals


def rerun_events(
    config: EngineConfig,
    arrivals: list[Arrival],
    runner_kind: str,
    sink: EventSink,
    features: ReleaseFeatures | None = None,
    max_steps: int = MAX_RERUN_STEPS,
) -> None:
    """Run to completion (or `max_steps`) on a virtual clock; every engine event goes to
    `sink`, in order. `features`: the release's with some changes reverted."""
    clock = VirtualClock()
    runner = make_runner(runner_kind, config)
    engine = Engine(config, runner, sink, clock=clock, features=features)
    pending = sorted(arrivals, key=lambda a: a.t)
    i = 0
    while engine.step_index < min(max_steps, MAX_RERUN_STEPS):
        if not engine.has_unfinished_requests() and i < len(pending):
            clock.now = max(clock.now, pending[i].t)
        while i < len(pending) and pending[i].t <= clock.now:
            a = pending[i]
            engine.add_request(a.req_id, a.prompt_token_ids, a.params, a.priority, a.t)
            i += 1
        if not engine.has_unfinished_requests():
            if i >= len(pending):
                break
            continue
        event = engine.step()
        clock.now += event.forward_ms / 1000.0


def publish_closed_session(hub: EventHub, meta: SessionMeta, events: list[Event]) -> str:
    """A finished run's events as a new, closed session, recorded like any other (the
    recorder listens to the hub). Returns the new session's id."""
    new_id = new_session_id()
    hub.open_session(new_id, meta, live=False)
    for event in events:
        frame_type, frame = event_to_frame(event)
        if frame_type != "engine_snapshot":
            hub.publish(new_id, frame_type, frame)
    hub.close_session(new_id)
    return new_id
