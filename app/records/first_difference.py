"""The first step at which two recordings decide differently: both walked step by step
from their frames until the plans part. For two recordings of one trace under two vLLM
releases, the release changes between them (engine.releases CHANGES) are listed, and each
decision change is tried alone: the trace is run again as the newer release with that one
change reverted; a change explains the first difference when that run no longer differs
from the older release at that step (the way the changes were found in vLLM's source).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from itertools import zip_longest
from typing import Any, cast

from sqlalchemy.orm import Session

from app.db import queries
from app.db.models import SessionRecord
from app.frames.convert import iteration_data
from app.records.compare_types import (
    FirstDifferenceData,
    ReleaseChangeRow,
    StepLine,
    StepSignature,
)
from app.records.rerun import (
    load_arrivals,
    load_knob_changes,
    replayed_knob_changes,
    rerun_events,
)
from engine.config import ConfigError, EngineConfig
from engine.events import ListSink
from engine.releases import (
    SUPPORTED,
    ReleaseFeatures,
    changes_between,
    features_reverting,
    version_key,
)
from engine.scenario import Scenario, ScenarioError
from engine.simulate import run_scenario
from protocol.codes import FrameType
from protocol.wire import IterationData, Knobs

CONTEXT = 3
"""Steps shown before and after the first difference."""
EXPLAIN_MAX_STEPS = 5000
"""Attribution re-runs the trace up to the first difference once per change: only when
that difference comes within this many steps."""
WALK_MAX_STEPS = 200_000
"""Steps compared at most (a page view walks both recordings from their start)."""
DECISIVE = ("decision", "loop")
"""Kinds of change that can move a plan (stats, knobs at their defaults and validation
cannot)."""

Run = Callable[[EngineConfig, ReleaseFeatures | None, int], list[IterationData]]
"""(config, features or None for the release's own, steps) -> iteration frame data."""


def signature(data: IterationData) -> StepSignature:
    """What a step decided, from its `iteration` frame data (times, waiting reasons and
    block ids left out: they differ without a plan differing)."""
    q = data["queues"]
    return {
        "scheduled": [
            (m["req"], m["n"], m["start"], m.get("prefix_hit", 0)) for m in data["scheduled"]
        ],
        "new": list(data["new"]),
        "resumed": list(data["resumed"]),
        "preempted": [p["req"] for p in data["preempted"]],
        "finished": [f["req"] for f in data["finished"]],
        "queues": (q["running"], q["waiting"], q["running_end"], q["waiting_end"]),
        "kv_used": (data["kv"]["used"], data["kv"]["used_end"]),
        "spec": data.get("spec_tokens", 0),
        "accepted": data.get("accepted", {}),
    }


def step_row(data: IterationData) -> StepLine:
    """One side's step, for the step tables."""
    return {
        "step": data["step"],
        "plan": "{" + ", ".join(f"{m['req']}:{m['n']}" for m in data["scheduled"]) + "}",
        "tokens": sum(m["n"] for m in data["scheduled"]),
        "preempted": [p["req"] for p in data["preempted"]],
        "finished": [f["req"] for f in data["finished"]],
        "running": data["queues"]["running_end"],
        "waiting": data["queues"]["waiting_end"],
        "kv_used": data["kv"]["used_end"],
    }


@dataclass
class Walk:
    """The result of walking two step sequences side by side."""

    step: int | None = None
    fields: list[str] = field(default_factory=list)
    rows: dict[str, list[StepLine]] = field(default_factory=lambda: {"a": [], "b": []})
    before: list[tuple[StepSignature, StepSignature]] = field(default_factory=list)
    """Signatures of the equal steps before `step` (kept only up to EXPLAIN_MAX_STEPS)."""
    compared: int = 0
    """Steps found equal (WALK_MAX_STEPS at most: then the walk stopped there)."""


def walk(steps_a: Iterable[IterationData], steps_b: Iterable[IterationData]) -> Walk:
    out = Walk()
    recent: deque[tuple[IterationData | None, IterationData | None]] = deque(maxlen=CONTEXT)
    pairs: Iterator[tuple[Any, Any]] = zip_longest(steps_a, steps_b)
    for da, db in pairs:
        sa = signature(da) if da is not None else None
        sb = signature(db) if db is not None else None
        if sa is not None and sa == sb:
            out.compared += 1
            if out.compared >= WALK_MAX_STEPS:
                return out
            recent.append((da, db))
            if len(out.before) < EXPLAIN_MAX_STEPS:
                out.before.append((sa, sb))
            continue
        out.step = (da or db)["step"]
        if sa is None or sb is None:
            out.fields = ["steps"]  # one run ended while the other went on
        else:
            a_items, b_items = cast(dict[str, object], sa), cast(dict[str, object], sb)
            out.fields = [k for k in a_items if a_items[k] != b_items[k]]
        after = [(da, db)] + [p for _, p in zip(range(CONTEXT), pairs, strict=False)]
        for xa, xb in [*recent, *after]:
            out.rows["a"].append(step_row(xa) if xa is not None else {"step": None})
            out.rows["b"].append(step_row(xb) if xb is not None else {"step": None})
        return out
    return out


def first_step_apart(run_a: list[IterationData], run_b: list[IterationData]) -> int | None:
    for da, db in zip_longest(run_a, run_b):
        if da is None or db is None or signature(da) != signature(db):
            return int((da or db)["step"])
    return None


def recorded_steps(db: Session, session_id: str) -> Iterator[IterationData]:
    for _, text in queries.iter_frames(db, session_id):
        frame = json.loads(text)
        if frame.get("type") == FrameType.ITERATION:
            yield cast(IterationData, frame["data"])


def release_of(config: Knobs) -> str | None:
    value = config.get("vllm_version")
    return str(value) if value in SUPPORTED else None


def explain(
    run: Run, config_a: EngineConfig, config_b: EngineConfig, step: int, walked: Walk
) -> dict[str, bool] | None:
    """{flag: explains} for each decision change between the two releases, or None when
    the runs do not reproduce both recordings up to `step` (attribution would be a guess)."""
    a, b = config_a.vllm_version, config_b.vllm_version
    older, newer = sorted((a, b), key=version_key)
    steps = step + 1
    run_a, run_b = run(config_a, None, steps), run(config_b, None, steps)
    if first_step_apart(run_a, run_b) != step:
        return None
    again = [(signature(x), signature(y)) for x, y in zip(run_a, run_b, strict=False)]
    if again[: len(walked.before)] != walked.before:
        return None
    base, other = (run_a, config_b) if newer == b else (run_b, config_a)
    result: dict[str, bool] = {}
    for change in changes_between(a, b):
        if change.kind not in DECISIVE:
            continue
        reverted = run(other, features_reverting(newer, change.flag, older), steps)
        apart = first_step_apart(base, reverted)
        result[change.flag] = apart is None or apart > step
    return result


def arrivals_run(db: Session, session_id: str) -> Run | None:
    """The trace of a recording (its arrivals and knob changes, on the re-run's virtual
    clock), or None."""
    _, arrivals = load_arrivals(db, session_id)
    if not arrivals:
        return None
    recorded = load_knob_changes(db, session_id)

    def run(
        config: EngineConfig, features: ReleaseFeatures | None, steps: int
    ) -> list[IterationData]:
        try:
            knobs = replayed_knob_changes(config, recorded, ["vllm_version"])
        except ConfigError:  # (not under this release's knobs: the arrivals alone)
            knobs = []
        sink = ListSink()
        rerun_events(config, arrivals, "sim", sink, features, steps, knobs)
        return [iteration_data(ev) for ev in sink.iterations()]

    return run


def scenario_run(scenario: Scenario) -> Run:
    def run(
        config: EngineConfig, features: ReleaseFeatures | None, steps: int
    ) -> list[IterationData]:
        sink = ListSink()
        run_scenario(replace(scenario, config=config, max_steps=steps), None, sink, features)
        return [iteration_data(ev) for ev in sink.iterations()]

    return run


def first_difference(
    db: Session, a: str, b: str, scenario_of: Callable[[str], Scenario] | None = None
) -> FirstDifferenceData:
    """The first step at which recordings `a` and `b` differ (None: they never do), both
    sides' steps around it, and the release changes between them. Raises NotFound."""
    meta_a, meta_b = queries.get_session(db, a), queries.get_session(db, b)
    walked = walk(recorded_steps(db, a), recorded_steps(db, b))
    rel_a, rel_b = release_of(meta_a["config"]), release_of(meta_b["config"])
    explained: dict[str, bool] | None = None
    why = ""
    if walked.step is not None and rel_a and rel_b and rel_a != rel_b:
        run = _trace(db, a, scenario_of)
        if run is None:
            why = "the recording has no re-runnable arrivals"
        elif walked.step >= EXPLAIN_MAX_STEPS:
            why = f"the first difference comes after {EXPLAIN_MAX_STEPS} steps"
        else:
            try:
                cfg_a = EngineConfig().with_updates(**meta_a["config"])
                cfg_b = EngineConfig().with_updates(**meta_b["config"])
            except ConfigError as exc:
                why = f"a recorded config is not runnable: {exc}"
            else:
                explained = explain(run, cfg_a, cfg_b, walked.step, walked)
                if explained is None:
                    why = "re-running the trace does not reproduce both recordings"
    changes: list[ReleaseChangeRow] = []
    if rel_a and rel_b and rel_a != rel_b:
        for c in changes_between(rel_a, rel_b):
            explains = None if explained is None else explained.get(c.flag, False)
            changes.append(
                {
                    "flag": c.flag,
                    "since": c.since,
                    "kind": c.kind,
                    "summary": c.summary,
                    "source": c.source,
                    "explains": explains,
                }
            )
    return {
        "a": {"session": a, "name": meta_a["name"], "vllm_version": rel_a},
        "b": {"session": b, "name": meta_b["name"], "vllm_version": rel_b},
        "step": walked.step,
        "fields": walked.fields,
        "compared": walked.compared,
        "rows": walked.rows,
        "changes": changes,
        "explained_by": [c["flag"] for c in changes if c["explains"]],
        "explain_note": why,
    }


def _trace(
    db: Session, session_id: str, scenario_of: Callable[[str], Scenario] | None
) -> Run | None:
    """How to run `session_id`'s trace again: its scenario (a release pair made from a
    scenario records its name), else its recorded arrivals."""
    rec = db.get(SessionRecord, session_id)
    name = dict(rec.meta or {}).get("scenario") if rec is not None else None
    if name and scenario_of is not None:
        try:
            return scenario_run(scenario_of(str(name)))
        except (KeyError, ScenarioError, OSError):
            pass
    return arrivals_run(db, session_id)
