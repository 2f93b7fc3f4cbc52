"""Sweeps: run one workload under every value (or grid of values) of one or two engine
knobs, N repeats each, in parallel worker processes, and collect each run's figures.

A point is a scenario (a dict in the scenario format) with knob values written into its
config; `run_point` runs it through `simulate` (its figures folded as it runs). On the
SimRunner the same sweep gives identical numbers every time; repeats differ only when the
workload is generated (`workload_scenario`), each repeat with its own seed. `run_sweep`
(engine.sweep_pool) runs every point in worker processes.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import random
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from engine.config import CacheConfig, SchedulerConfig
from engine.faults import stopped_text
from engine.mooncake import TraceRow, trace_requests
from engine.scenario import parse_scenario

SWEEPABLE = sorted(
    {f.name for f in fields(SchedulerConfig)}
    | {f.name for f in fields(CacheConfig)}
    | {"vllm_version"}
)
TEXT_KNOBS = {"vllm_version"}
"""Knobs whose values stay text ('0.20' is a release, not the number 0.2)."""
MAX_POINTS = 400


class SweepError(ValueError):
    """A sweep that cannot run: the message names the knob or value at fault."""


@dataclass(frozen=True, slots=True)
class Knob:
    name: str
    values: tuple[Any, ...]


def parse_value(text: str) -> Any:
    text = text.strip()
    low = text.lower()
    if low in ("true", "on", "yes"):
        return True
    if low in ("false", "off", "no"):
        return False
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return text
    if not math.isfinite(value):
        raise SweepError(f"{text!r} is not a finite number")
    return value


def parse_knob(text: str) -> Knob:
    """`NAME=V1,V2,...` (also `NAME=LO:HI:STEP` for integer ranges)."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not raw.strip():
        raise SweepError(f"--knob {text!r}: expected NAME=V1,V2,...")
    if name not in SWEEPABLE:
        raise SweepError(f"--knob {name!r}: not an engine knob (one of {', '.join(SWEEPABLE)})")
    if name in TEXT_KNOBS:
        values: tuple[Any, ...] = tuple(v.strip() for v in raw.split(",") if v.strip())
    elif raw.count(":") == 2 and "," not in raw:
        lo, hi, step = (parse_value(p) for p in raw.split(":"))
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi, step)):
            raise SweepError(f"--knob {name}: a range LO:HI:STEP takes integers")
        if step <= 0 or hi < lo:
            raise SweepError(f"--knob {name}: a range needs LO <= HI and STEP > 0")
        values = tuple(range(lo, hi + 1, step))
    else:
        values = tuple(parse_value(v) for v in raw.split(",") if v.strip())
    if not values:
        raise SweepError(f"--knob {name}: no values")
    return Knob(name, values)


@dataclass(frozen=True, slots=True)
class SweepPoint:
    index: int
    knobs: dict[str, Any]
    repeat: int


def plan_points(knobs: list[Knob], repeat: int) -> list[SweepPoint]:
    if not 1 <= len(knobs) <= 2:
        raise SweepError("sweep one knob, or two for a grid")
    if len({k.name for k in knobs}) != len(knobs):
        raise SweepError("the two knobs of a grid must differ")
    if repeat < 1:
        raise SweepError("--repeat must be >= 1")
    combos = list(itertools.product(*(k.values for k in knobs)))
    if len(combos) * repeat > MAX_POINTS:
        raise SweepError(f"{len(combos) * repeat} runs: at most {MAX_POINTS} per sweep")
    names = [k.name for k in knobs]
    points: list[SweepPoint] = []
    for combo in combos:
        for r in range(repeat):
            points.append(SweepPoint(len(points), dict(zip(names, combo, strict=True)), r))
    return points


def point_scenario(base: Mapping[str, Any], point: SweepPoint) -> dict[str, Any]:
    """The base scenario with the point's knob values in its config (validated)."""
    data = copy.deepcopy(dict(base))
    data.setdefault("config", {}).update(point.knobs)
    if "workload" in data:
        spec = data.pop("workload")
        data["requests"] = workload_requests(spec, int(spec.get("seed", 0)) + point.repeat)
    if "trace" in data:
        data["requests"] = trace_source_requests(data.pop("trace"))
    try:
        parse_scenario(data)
    except ValueError as exc:
        raise SweepError(f"point {point.knobs}: {exc}") from None
    return data


def workload_requests(spec: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    """Requests of a generated workload, arriving by the runner's clock: `poisson` (rate
    per second) or `bursty` (bursts of `burst` requests at `rate` bursts per second)."""
    rng = random.Random(seed)
    kind = spec.get("kind", "poisson")
    rate = float(spec.get("rate", 20.0))
    count = int(spec.get("num_requests", 200))
    prompt_mean = int(spec.get("prompt_len_mean", 256))
    output_mean = int(spec.get("max_tokens_mean", 64))
    burst = int(spec.get("burst", 8)) if kind == "bursty" else 1
    if kind not in ("poisson", "bursty") or rate <= 0 or count < 1 or burst < 1:
        raise SweepError("workload: kind poisson|bursty, rate > 0, num_requests >= 1")
    out: list[dict[str, Any]] = []
    t = 0.0
    while len(out) < count:
        t += rng.expovariate(rate) * 1000.0
        for _ in range(min(burst, count - len(out))):
            plen = max(1, min(4 * prompt_mean, int(rng.expovariate(1 / prompt_mean))))
            out.append(
                {
                    "id": f"w{len(out)}",
                    "arrival_time_ms": round(t, 3),
                    "prompt_token_ids": [rng.randint(3, 258) for _ in range(plen)],
                    "max_tokens": max(
                        1, min(4 * output_mean, int(rng.expovariate(1 / output_mean)))
                    ),
                }
            )
    return out


def trace_source(rows: list[TraceRow], block_tokens: int) -> dict[str, Any]:
    """A trace as a base scenario's compact `trace` entry (its prompts are built per
    point, so a stored sweep keeps the rows, not millions of tokens)."""
    return {
        "block_tokens": block_tokens,
        "rows": [[r.timestamp, r.input_length, r.output_length, list(r.hash_ids)] for r in rows],
    }


def trace_source_requests(spec: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        block_tokens = int(spec["block_tokens"])
        rows = [
            TraceRow(i + 1, float(ts), int(n_in), int(n_out), tuple(ids))
            for i, (ts, n_in, n_out, ids) in enumerate(spec["rows"])
        ]
    except (KeyError, TypeError, ValueError):
        raise SweepError(
            "trace: expected {block_tokens, rows: [[ts, in, out, ids], ...]}"
        ) from None
    return trace_requests(rows, block_tokens)


@dataclass
class PointResult:
    point: SweepPoint
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    stopped: dict[str, Any] | None = None
    """The run was cut short (engine.simulate: {reason, at_step, unfinished}): its metrics
    cover only what ran, and the point is not complete."""

    @property
    def complete(self) -> bool:
        return self.error is None and self.stopped is None

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self.point),
            "metrics": self.metrics,
            "error": self.error,
            "complete": self.complete,
            "stopped": self.stopped,
        }


def run_point(
    base: Mapping[str, Any], point: SweepPoint, runner: str = "sim", cost_model: str | None = None
) -> PointResult:
    """One run (in a worker process): the point's scenario through simulate."""
    from engine.faults import failure_text
    from engine.simulate import run_scenario_metrics

    data = point_scenario(base, point)
    scenario = parse_scenario(data)
    del data  # the point's requests live on in `scenario` alone
    # Figures folded as the run goes: memory is what the engine holds, not the run's length.
    result = run_scenario_metrics(scenario, make_point_runner(runner, cost_model, scenario.config))
    failure = result.get("failure")
    error = failure_text(failure) if failure else None
    stopped = result.get("stopped") if failure is None else None
    return PointResult(point, result["metrics"], error, stopped)


def make_point_runner(runner: str, cost_model: str | None, config: Any) -> Any:
    if runner == "sim":
        from engine.runner.cost_model import load_cost_model
        from engine.runner.sim import SimRunner

        return SimRunner(load_cost_model(cost_model) if cost_model else None)
    if runner == "torch":
        from engine.runner.torch_runner import TorchRunner

        return TorchRunner(config, device="cpu", num_threads=1)
    raise SweepError(f"unknown runner {runner!r} (sim or torch)")


def iter_rows(results: list[PointResult]) -> Iterator[dict[str, Any]]:
    """Flat rows (knobs, repeat, metrics) for CSV/JSON output."""
    for res in results:
        row: dict[str, Any] = {**res.point.knobs, "repeat": res.point.repeat}
        row.update(res.metrics)
        if res.error:
            row["error"] = res.error
        if res.stopped:
            row["stopped"] = stopped_text(res.stopped)
        yield row


def to_json(results: list[PointResult], meta: dict[str, Any]) -> str:
    return json.dumps({**meta, "points": [r.as_dict() for r in results]}, indent=1)
