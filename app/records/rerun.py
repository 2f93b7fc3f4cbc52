"""Re-run a recording's arrivals through a fresh engine under other knobs.

Arrivals keep their recorded times; the engine runs on a virtual clock that advances by
each step's runner time, so changing a knob (say the chunk size) changes step times and
therefore who is waiting when, exactly as it would live. Knobs changed during the
recording are changed in the re-run at their recorded times too (`KnobChange`: the start
of the first step the recording decided under them), like arrivals; a knob the re-run
is given (an override) holds throughout, and its recorded changes are dropped. The result
is a new recorded session (source `rerun`), comparable side by side with the original.
The engine runs in a process of its own (app.records.rerun_process), never in the web
process; its frames stream to the recorder's writer, so memory stays bounded however long
the run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.frame_codec import unpack_frame
from app.db.models import ConfigChangeRecord, EventRecord, IterationRecord, SessionRecord
from app.db.queries import SessionRow, get_session
from app.live.hub import EventHub
from app.protocol.convert import event_to_frame
from engine.config import ConfigError, EngineConfig
from engine.engine import Engine
from engine.events import Event, EventSink
from engine.releases import SUPPORTED, ReleaseFeatures, nearest_supported
from engine.request import SamplingParams
from engine.runner import make_runner
from engine.virtual_clock import VirtualClock
from protocol.codes import FrameType, RequestMark
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


@dataclass(frozen=True, slots=True)
class KnobChange:
    """Knobs the recording changed: in force from its step `step`, which began at `t`."""

    t: float
    step: int
    changes: dict[str, Any]


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
        .where(EventRecord.session_id == session_id, EventRecord.type == FrameType.REQUEST)
        .order_by(EventRecord.seq)
    )
    for stored in rows:
        data = json.loads(unpack_frame(stored))["data"]
        if data["kind"] != RequestMark.ARRIVED:
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


def load_knob_changes(db: Session, session_id: str) -> list[KnobChange]:
    """The knob changes a recording made, in order, each with the time its step began
    (a change after the last step: that step's end)."""
    rows = db.execute(
        select(ConfigChangeRecord.step, ConfigChangeRecord.changes)
        .where(ConfigChangeRecord.session_id == session_id)
        .order_by(ConfigChangeRecord.config_version)
    ).all()
    if not rows:
        return []
    starts = dict(
        db.execute(
            select(IterationRecord.step, IterationRecord.t_start).where(
                IterationRecord.session_id == session_id,
                IterationRecord.step.in_({step for step, _ in rows}),
            )
        ).all()
    )
    last = db.execute(
        select(IterationRecord.t_start + IterationRecord.duration)
        .where(IterationRecord.session_id == session_id)
        .order_by(IterationRecord.step.desc())
        .limit(1)
    ).scalar()
    end = float(last or 0.0)
    return [KnobChange(float(starts.get(step, end)), step, dict(ch)) for step, ch in rows]


def replayed_knob_changes(
    config: EngineConfig, recorded: list[KnobChange], overrides: Iterable[str] = ()
) -> list[KnobChange]:
    """The recorded changes a re-run from `config` makes: without the overridden knobs
    (those hold throughout), each checked against the knobs before it (ConfigError names
    the knob and the step)."""
    held = set(overrides)
    out: list[KnobChange] = []
    for change in recorded:
        kept = {k: v for k, v in change.changes.items() if k not in held}
        if not kept:
            continue
        try:
            config = config.with_updates(**kept)
        except ConfigError as exc:
            raise ConfigError(
                exc.field, f"{exc.message} (the recorded change at step {change.step})"
            ) from None
        out.append(KnobChange(change.t, change.step, kept))
    return out


def rerun_events(
    config: EngineConfig,
    arrivals: list[Arrival],
    runner_kind: str,
    sink: EventSink,
    features: ReleaseFeatures | None = None,
    max_steps: int = MAX_RERUN_STEPS,
    knobs: Sequence[KnobChange] = (),
) -> None:
    """Run to completion (or `max_steps`) on a virtual clock; every engine event goes to
    `sink`, in order. `features`: the release's with some changes reverted. `knobs`: knob
    changes made once the clock reaches their time, before the step (and the arrivals)
    due then (replayed_knob_changes)."""
    clock = VirtualClock()
    runner = make_runner(runner_kind, config)
    engine = Engine(config, runner, sink, clock=clock, features=features)
    pending = sorted(arrivals, key=lambda a: a.t)
    changes = sorted(knobs, key=lambda k: k.t)
    i = j = 0
    while engine.step_index < min(max_steps, MAX_RERUN_STEPS):
        if not engine.has_unfinished_requests() and i < len(pending):
            clock.jump_to(pending[i].t)
        while j < len(changes) and changes[j].t <= clock.now:
            engine.update_config(**changes[j].changes)
            j += 1
        while i < len(pending) and pending[i].t <= clock.now:
            a = pending[i]
            engine.add_request(a.req_id, a.prompt_token_ids, a.params, a.priority, a.t)
            i += 1
        if not engine.has_unfinished_requests():
            if i >= len(pending):
                break
            continue
        engine.step()  # the engine advances the clock by the step's runner time


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
