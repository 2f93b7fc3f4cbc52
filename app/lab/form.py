"""A sweep asked for by the lab page or the API (flat fields, JSON or form data) as a
SweepSpec. Fields: source (library | workload | session | scenario), scenario (a library
name), workload (`poisson:rate=20,n=200`), session (a recording's id), scenario_json (a
scenario object or its JSON text), trace_jsonl + trace_name + block_tokens (an uploaded
Mooncake trace), knob + values (`128,256` or a list), knob2 + values2
(a grid), set (`NAME=VALUE` lines), repeat, runner, cost_model, seed, name."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from sqlalchemy.orm import Session

from app.lab.scenario_types import BaseScenario
from app.lab.sources import (
    SourceError,
    apply_settings,
    library_scenario,
    recording_scenario,
    scenario_text,
    trace_text,
    workload_spec,
)
from app.lab.spec import SweepSpec
from engine.sweep import Knob, SweepError, parse_knob

SOURCES = ("library", "workload", "session", "scenario", "trace")

Form = Mapping[str, object]
"""The lab form's fields as posted (JSON or form data): checked here, field by field."""


def _text(data: Form, key: str, default: str = "") -> str:
    value = data.get(key, default)
    if value is None:
        return default
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value).strip()


def _int(data: Form, key: str, default: int, low: int, high: int) -> int:
    raw = _text(data, key) or str(default)
    try:
        value = int(raw)
    except ValueError:
        raise SweepError(f"{key}: {raw!r} is not a whole number") from None
    if not low <= value <= high:
        raise SweepError(f"{key}: {low} to {high}")
    return value


def _knobs(data: Form) -> list[Knob]:
    knobs = []
    for name_key, values_key in (("knob", "values"), ("knob2", "values2")):
        name = _text(data, name_key)
        values = _text(data, values_key)
        if not name and not values:
            continue
        if not name or not values:
            raise SweepError(f"{name_key}: give a knob and its values (e.g. 128,256)")
        knobs.append(parse_knob(f"{name}={values}"))
    if not knobs:
        raise SweepError("knob: choose a knob to sweep and its values")
    return knobs


def _base(data: Form, open_db: Callable[[], Session]) -> tuple[BaseScenario, str]:
    """The base scenario and a label for it."""
    kind = _text(data, "source", "library")
    seed = _int(data, "seed", 0, 0, 2**31 - 1)
    if kind == "library":
        name = _text(data, "scenario")
        return library_scenario(name), f"scenarios/{name}.json"
    if kind == "workload":
        text = _text(data, "workload")
        return workload_spec(text, seed), f"{text} (seed {seed})"
    if kind == "session":
        session_id = _text(data, "session")
        if not session_id:
            raise SourceError("session: the id of a recorded session")
        with open_db() as db:
            return recording_scenario(db, session_id), f"recording {session_id}"
    if kind == "scenario":
        raw = data.get("scenario_json")
        text = raw if isinstance(raw, str) else json.dumps(raw)
        base = scenario_text(text, "scenario_json")
        return base, str(base.get("name") or "pasted scenario")
    if kind == "trace":
        lines = data.get("trace_jsonl")
        if not isinstance(lines, str) or not lines.strip():
            raise SourceError("trace_jsonl: the trace's lines (Mooncake JSONL)")
        block_tokens = _int(data, "block_tokens", 512, 1, 1 << 20)
        name = _text(data, "trace_name")[:200] or "uploaded trace"
        return trace_text(lines, name, block_tokens), f"trace {name}"
    raise SourceError(f"source: one of {', '.join(SOURCES)}")


def spec_from_form(data: Form, open_db: Callable[[], Session]) -> SweepSpec:
    """Raises SourceError or SweepError (both ValueError) with one sentence."""
    base, label = _base(data, open_db)
    settings = [line for line in _text(data, "set").replace(";", "\n").splitlines() if line]
    base = apply_settings(base, [s.strip() for s in settings])
    runner = _text(data, "runner", "sim") or "sim"
    return SweepSpec(
        base=base,
        knobs=_knobs(data),
        repeat=_int(data, "repeat", 1, 1, 50),
        runner=runner,
        cost_model=_text(data, "cost_model") or None,
        name=_text(data, "name")[:200],
        source={"kind": _text(data, "source", "library"), "label": label},
    )
