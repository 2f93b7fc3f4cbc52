"""Where a sweep's workload comes from, as a base scenario (engine/scenario.py's format,
plus `workload` for generated ones): a scenario file, a library scenario (scenarios/), a
recording's arrivals at their recorded times, a seeded Poisson/bursty workload spec, or a
Mooncake JSONL trace (`trace` in the base: its rows, expanded per point).

Every function raises SourceError with one sentence a person can act on.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import cast

from sqlalchemy.orm import Session

from app.errors import NotFound
from app.lab.scenario_types import BaseScenario, ScenarioRequest, TraceSource, WorkloadSpec
from app.nodes.scenarios import SCENARIO_DIR, list_scenario_names
from app.records.rerun import load_arrivals
from engine.mooncake import DEFAULT_BLOCK_TOKENS, TraceError, parse_trace, trace_config
from engine.scenario import ScenarioError, parse_scenario
from engine.sweep import SWEEPABLE, SweepError, parse_knob, trace_source
from engine.trace_prompt import TracePrompt

MAX_SCENARIO_BYTES = 4 << 20
MAX_WORKLOAD_REQUESTS = 5000
# Short names a workload spec may use for workload_requests' keys.
WORKLOAD_ALIASES = {
    "n": "num_requests",
    "prompt": "prompt_len_mean",
    "output": "max_tokens_mean",
}
WORKLOAD_KEYS = {"rate", "num_requests", "prompt_len_mean", "max_tokens_mean", "burst"}
WORKLOAD_HELP = "poisson:rate=20,n=200[,prompt=256,output=64] or bursty:rate=2,burst=8,n=200"


class SourceError(ValueError):
    """A sweep source that cannot be used."""


def _checked(data: object, where: str) -> BaseScenario:
    """A scenario object that parses (its knobs are validated again per point)."""
    try:
        parse_scenario(data)
    except ScenarioError as exc:
        raise SourceError(f"{where}: {exc}") from None
    assert isinstance(data, dict)
    return cast(BaseScenario, data)


def scenario_text(text: str, where: str) -> BaseScenario:
    """A scenario given as JSON text (a file's, or pasted into the lab page)."""
    if len(text) > MAX_SCENARIO_BYTES:
        raise SourceError(f"{where}: larger than {MAX_SCENARIO_BYTES >> 20} MiB")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceError(f"{where}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    return _checked(data, where)


def scenario_file(path: str) -> BaseScenario:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SourceError(f"{path}: cannot read the file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise SourceError(f"{path}: not a UTF-8 text file") from None
    return scenario_text(text, path)


def library_scenario(name: str) -> BaseScenario:
    """scenarios/NAME.json (the scenarios a live session can load)."""
    names = list_scenario_names()
    if name not in names:
        raise SourceError(f"no library scenario {name!r} (one of {', '.join(names)})")
    return scenario_file(str(SCENARIO_DIR / f"{name}.json"))


def _number(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SourceError(f"workload {key}={text!r}: not a number") from None
    if not 0 < value < 1e9:
        raise SourceError(f"workload {key}: must be > 0")
    return value


def workload_spec(text: str, seed: int = 0) -> BaseScenario:
    """`KIND:KEY=V,...` -> a base scenario generating that workload (seed + repeat)."""
    kind, _, rest = text.strip().partition(":")
    if kind not in ("poisson", "bursty"):
        raise SourceError(f"workload {text!r}: expected {WORKLOAD_HELP}")
    spec: WorkloadSpec = {"kind": kind, "seed": seed}
    numbers = cast(dict[str, float], spec)  # its number keys, checked below (WORKLOAD_KEYS)
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = part.partition("=")
        key = WORKLOAD_ALIASES.get(key.strip(), key.strip())
        if not sep or key not in WORKLOAD_KEYS:
            raise SourceError(f"workload {part!r}: expected KEY=VALUE, keys {WORKLOAD_HELP}")
        if key == "burst" and kind != "bursty":
            raise SourceError("workload burst: only for bursty")
        number = _number(key, value)
        numbers[key] = number if key == "rate" else int(number)
    count = spec.get("num_requests", 200)
    if count > MAX_WORKLOAD_REQUESTS:
        raise SourceError(f"workload n: at most {MAX_WORKLOAD_REQUESTS} requests")
    longest = 4 * (spec.get("prompt_len_mean", 256) + spec.get("max_tokens_mean", 64))
    return {
        "name": f"{kind} workload",
        "description": f"{text.strip()} (seed {seed}; repeat r uses seed {seed}+r)",
        # Room for the longest generated request (lengths are capped at 4x their mean).
        "config": {"max_model_len": max(2048, longest)},
        "workload": spec,
    }


def trace_lines(lines: Iterable[str], where: str, block_tokens: int) -> BaseScenario:
    """A Mooncake JSONL trace as a base scenario: arrivals at their timestamps, knobs with
    room for its longest request (engine/mooncake.py)."""
    try:
        rows = parse_trace(lines, block_tokens)
    except TraceError as exc:
        raise SourceError(f"{where}: {exc}") from None
    return {
        "name": where,
        "description": f"Mooncake trace {where}: {len(rows)} requests, {block_tokens}-token blocks",
        "config": trace_config(rows),
        "trace": cast(TraceSource, trace_source(rows, block_tokens)),
    }


def trace_file(path: str, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> BaseScenario:
    """`trace:FILE` as a sweep source."""
    try:
        with Path(path).open(encoding="utf-8") as fh:
            return trace_lines(fh, path, block_tokens)
    except OSError as exc:
        raise SourceError(f"{path}: cannot read the file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise SourceError(f"{path}: not a UTF-8 text file") from None


def trace_text(text: str, where: str, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> BaseScenario:
    """A trace uploaded to the lab page (its text)."""
    if len(text) > MAX_SCENARIO_BYTES:
        raise SourceError(f"{where}: larger than {MAX_SCENARIO_BYTES >> 20} MiB")
    return trace_lines(text.splitlines(), where, block_tokens)


def recording_scenario(db: Session, session_id: str) -> BaseScenario:
    """A recording's arrivals at their recorded times, under its recorded knobs."""
    try:
        meta, arrivals = load_arrivals(db, session_id)
    except NotFound as exc:
        raise SourceError(str(exc)) from None
    if not arrivals:
        raise SourceError(f"session {session_id}: no re-runnable arrivals (no prompts recorded)")
    config = {k: v for k, v in (meta["config"] or {}).items() if k in SWEEPABLE}
    requests: list[ScenarioRequest] = []
    for a in arrivals:
        req: ScenarioRequest = {
            "id": a.req_id,
            "arrival_time_ms": round(a.t * 1000.0, 6),
            "max_tokens": a.params.max_tokens,
            "priority": a.priority,
            "temperature": a.params.temperature,
            "top_p": a.params.top_p,
        }
        if isinstance(a.prompt_token_ids, TracePrompt):
            req["trace_prompt"] = a.prompt_token_ids.as_dict()
        else:
            req["prompt_token_ids"] = list(a.prompt_token_ids)
        if a.params.seed is not None:
            req["seed"] = a.params.seed
        requests.append(req)
    data: BaseScenario = {
        "name": f"recording {session_id}",
        "description": f"the arrivals of {meta['name'] or session_id} at their recorded times",
        "config": config,
        "requests": requests,
    }
    return _checked(data, f"session {session_id}")


def apply_settings(base: BaseScenario, settings: list[str]) -> BaseScenario:
    """`NAME=VALUE` knobs fixed for every point (on top of the source's config)."""
    config = dict(base.get("config", {}))
    out: BaseScenario = {**base, "config": config}
    for text in settings:
        try:
            knob = parse_knob(text)
        except SweepError as exc:
            raise SourceError(str(exc).replace("--knob", "--set")) from None
        if len(knob.values) != 1:
            raise SourceError(f"--set {text!r}: one value (sweep several with --knob)")
        config[knob.name] = knob.values[0]
    return out
