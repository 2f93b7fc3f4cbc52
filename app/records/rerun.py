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
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.frame_codec import unpack_frame
from app.db.models import ConfigChangeRecord, EventRecord, IterationRecord, SessionRecord
from app.db.queries import SessionRow, get_session, iter_frames
from app.frames.convert import event_to_frame
from app.live.hub import EventHub
from app.records.node_rerun import NodePrompts
from engine.config import ConfigError, EngineConfig
from engine.engine import Engine
from engine.events import Event, EventSink
from engine.releases import SUPPORTED, ReleaseFeatures, nearest_supported
from engine.request import SamplingParams
from engine.runner import make_runner
from engine.runner.cost_model import load_cost_model
from engine.runner.recorded import EOS_TOKEN, RecordedRunner
from engine.runner.recorded_timeline import RecordedTimeline, plan_of, timeline_of
from engine.trace_prompt import TracePrompt
from engine.virtual_clock import VirtualClock
from protocol.codes import FrameType, RequestMark
from protocol.session import new_session_id
from protocol.wire import SessionMeta

MAX_RERUN_STEPS = 200_000
RECORDED = "recorded"
"""The default re-run runner: the SimRunner on the recording's own clock."""


@dataclass(frozen=True, slots=True)
class Arrival:
    t: float
    req_id: str
    prompt_token_ids: Sequence[int]
    """Token ids, or a trace's lazy prompt (engine.trace_prompt: re-run without tokens)."""
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
    node_prompts = NodePrompts()
    for stored in rows:
        data = json.loads(unpack_frame(stored))["data"]
        if data["kind"] != RequestMark.ARRIVED:
            continue
        d = data["detail"]
        # A vLLM node sends its prompts' block keys, not the prompts (app.records.node_rerun);
        # a trace's request its block chain (engine.trace_prompt).
        prompt: Sequence[int] | None
        if "prompt_token_ids" in d:
            prompt = d["prompt_token_ids"]
        elif "trace_prompt" in d:
            prompt = TracePrompt.from_dict(d["trace_prompt"])
        else:
            prompt = node_prompts.prompt(d)
        if prompt is None:
            continue  # recorded by a producer that sent neither: cannot re-run
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
                prompt if isinstance(prompt, TracePrompt) else list(prompt),
                params,
                int(d.get("priority", 0)),
            )
        )
    return meta, arrivals


def load_timeline(db: Session, session_id: str) -> RecordedTimeline:
    """The recording's timeline (engine.runner.recorded_timeline), from its frames."""
    frames = (json.loads(text) for _, text in iter_frames(db, session_id))
    return timeline_of(
        (f["type"], f["data"])
        for f in frames
        if f["type"] in (FrameType.ITERATION, FrameType.REQUEST)
    )


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
    timeline: RecordedTimeline | None = None,
    cost_model: str | None = None,
) -> None:
    """Run to completion (or `max_steps`) on a virtual clock; every engine event goes to
    `sink`, in order. `features`: the release's with some changes reverted. `knobs`: knob
    changes made once the clock reaches their time, before the step (and the arrivals)
    due then (replayed_knob_changes). `timeline` (runner `recorded`): the recording's, to
    follow while the plan matches it (engine.runner.recorded_timeline). `cost_model`
    (runner sim): a preset or cost-model file for its step times."""
    clock = VirtualClock()
    if runner_kind == RECORDED:
        follow = timeline or RecordedTimeline()
        _follow_recording(config, arrivals, sink, features, max_steps, knobs, follow, clock)
        return
    options = {"cost_model": load_cost_model(cost_model)} if cost_model else {}
    runner = make_runner(runner_kind, config, **options)
    engine = Engine(config, runner, sink, clock=clock, features=features)
    pending = sorted(arrivals, key=lambda a: a.t)
    changes = sorted(knobs, key=lambda k: k.t)
    _by_time(engine, clock, pending, changes, min(max_steps, MAX_RERUN_STEPS), 0, 0)


def _by_time(
    engine: Engine,
    clock: VirtualClock,
    pending: list[Arrival],
    changes: list[KnobChange],
    max_steps: int,
    i: int,
    j: int,
) -> None:
    """Step on, arrivals `pending[i:]` and knob changes `changes[j:]` at their times."""
    while engine.step_index < max_steps:
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


def _follow_recording(
    config: EngineConfig,
    arrivals: list[Arrival],
    sink: EventSink,
    features: ReleaseFeatures | None,
    max_steps: int,
    knobs: Sequence[KnobChange],
    timeline: RecordedTimeline,
    clock: VirtualClock,
) -> None:
    """The RecordedRunner's re-run: while each step's plan equals the recording's, step k
    starts at its recorded time, after the requests recorded in its `arrived` list and
    the knob changes recorded at it; from the first divergence on, by time
    (`_by_time`) on the fitted cost model's clock."""
    stops = timeline.stop_lengths
    arrivals = [
        replace(a, params=replace(a.params, ignore_eos=False, eos_token_id=EOS_TOKEN))
        if a.req_id in stops
        else a
        for a in arrivals
    ]
    lengths = {a.req_id: len(a.prompt_token_ids) for a in arrivals}
    runner = RecordedRunner(timeline, clock, lengths)
    engine = Engine(config, runner, sink, clock=clock, features=features)
    by_id = {a.req_id: a for a in arrivals}
    added: set[str] = set()
    applied: set[int] = set()
    limit = min(max_steps, MAX_RERUN_STEPS)
    while engine.step_index < min(limit, len(timeline)):
        k = engine.step_index
        rec = timeline.steps[k]
        clock.jump_to(rec.t_start)
        for n, change in enumerate(knobs):
            if change.step == k and n not in applied:
                engine.update_config(**change.changes)
                applied.add(n)
        for req in rec.arrived:
            a = by_id.get(req)
            if a is not None and req not in added:
                engine.add_request(a.req_id, a.prompt_token_ids, a.params, a.priority, a.t)
                added.add(req)
        event = engine.step()
        _, data = event_to_frame(event)
        if not timeline.matches(k, plan_of(data)):
            runner.diverge()
            break
    else:
        if not engine.has_unfinished_requests() and len(added) == len(by_id):
            return  # reproduced the recording to its last step
    runner.diverge()
    pending = sorted((a for a in arrivals if a.req_id not in added), key=lambda a: a.t)
    changes = sorted((c for n, c in enumerate(knobs) if n not in applied), key=lambda c: c.t)
    _by_time(engine, clock, pending, changes, limit, 0, 0)


def publish_closed_session(hub: EventHub, meta: SessionMeta, events: list[Event]) -> str:
    """A finished run's events as a new, closed session, recorded like any other (the
    recorder listens to the hub). Returns the new session's id."""
    new_id = new_session_id()
    hub.open_session(new_id, meta, live=False)
    for event in events:
        frame_type, frame = event_to_frame(event)
        hub.publish(new_id, frame_type, frame)
    hub.close_session(new_id)
    return new_id
