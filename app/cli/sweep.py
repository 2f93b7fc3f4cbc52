"""`batchscope sweep`: one workload under every value (or grid of values) of one or two
engine knobs, N repeats each, in parallel worker processes; a progress bar on stderr, a
table of the main figures on stdout, every figure in --out (JSON or CSV). Ctrl-C stops
starting points, lets the running ones finish and still writes what finished (exit 130).
A run cut short (its scenario's max_steps, or --max-steps) is marked incomplete, in the
table and --out, and the sweep exits 3."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

from app.cli.common import CliError, add_database_flag, add_vllm_version_flag, open_db

if TYPE_CHECKING:
    from app.lab.scenario_types import BaseScenario, SweepSource


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a workload under several values of one or two engine knobs",
        description="SOURCE is a scenario file, a library scenario name (scenarios/) or "
        "trace:FILE (a Mooncake JSONL trace); "
        "or give --session ID (a recording's arrivals at their recorded times), "
        "--workload SPEC (e.g. poisson:rate=20,n=200) or --experiment NAME.",
    )
    p.add_argument("source", nargs="?", metavar="SOURCE")
    p.add_argument("--session", metavar="ID", help="a recorded session's arrivals")
    p.add_argument("--workload", metavar="SPEC", help="poisson:rate=20,n=200 or bursty:...")
    p.add_argument("--experiment", metavar="NAME", help="a ready lab experiment")
    p.add_argument("--knob", action="append", default=[], metavar="NAME=V1,V2,...")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a knob fixed for every point")  # fmt: skip
    add_vllm_version_flag(p, "same as --set vllm_version=V (default: the source's)")
    p.add_argument("--repeat", type=int, help="runs per point (default 1)")
    p.add_argument("--runner", choices=("sim", "torch"))
    p.add_argument("--cost-model", metavar="FILE|PRESET", help="e.g. h100:llama-3-8b")
    p.add_argument("--seed", type=int, default=0, help="seed of a generated workload")
    p.add_argument(
        "--block-tokens", type=int, default=512, metavar="N", help="trace:FILE: tokens per hash id"
    )
    p.add_argument(
        "--max-steps",
        type=int,
        metavar="N",
        help="engine steps a run may take before it stops, marked incomplete (default: the "
        "source's config.max_steps, else 100000; an hour-long trace under overload needs more)",
    )
    p.add_argument("--workers", type=int, help="worker processes (default: one per core)")
    p.add_argument("--out", metavar="FILE.json|FILE.csv")
    add_database_flag(p)
    p.set_defaults(run=cmd_sweep)


def _base(args: argparse.Namespace) -> tuple[BaseScenario, SweepSource]:
    from app.lab.sources import library_scenario, recording_scenario, scenario_file, trace_file
    from app.lab.sources import workload_spec as parse_workload
    from app.nodes.scenarios import list_scenario_names

    given = [x for x in (args.source, args.session, args.workload) if x]
    if len(given) != 1:
        raise CliError("give one source: SOURCE, --session ID, --workload SPEC or --experiment")
    if args.workload:
        source: SweepSource = {"kind": "workload", "label": args.workload}
        return parse_workload(args.workload, args.seed), source
    if args.session:
        with open_db(args)() as db:
            base = recording_scenario(db, args.session)
        return base, {"kind": "session", "label": f"recording {args.session}"}
    if args.source.startswith("trace:"):
        if args.block_tokens < 1:
            raise CliError("--block-tokens: must be at least 1")
        path = args.source[len("trace:") :]
        return trace_file(path, args.block_tokens), {"kind": "trace", "label": args.source}
    if Path(args.source).exists():
        return scenario_file(args.source), {"kind": "scenario", "label": args.source}
    if args.source in list_scenario_names():
        return library_scenario(args.source), {"kind": "library", "label": args.source}
    raise CliError(f"{args.source}: no such file, and no library scenario of that name")


def build_spec(args: argparse.Namespace) -> Any:
    from app.errors import NotFound
    from app.lab.experiments import get_experiment
    from app.lab.sources import apply_settings
    from app.lab.spec import SweepSpec
    from engine.sweep import parse_knob

    if args.experiment:
        if args.source or args.session or args.workload:
            raise CliError("--experiment brings its own workload: give no other source")
        try:
            spec = get_experiment(args.experiment).spec()
        except NotFound as exc:
            raise CliError(str(exc)) from None
        base, source, knobs = spec.base, spec.source, spec.knobs
    else:
        base, source = _base(args)
        spec, knobs = None, []
    if args.knob:
        knobs = [parse_knob(k) for k in args.knob]
    if not knobs:
        raise CliError("--knob NAME=V1,V2,...: what to sweep")
    runner = args.runner or (spec.runner if spec else "sim")
    cost_model = args.cost_model or (spec.cost_model if spec and runner == "sim" else None)
    base = apply_settings(
        base, [*args.set, *([f"vllm_version={args.vllm_version}"] if args.vllm_version else [])]
    )
    if args.max_steps is not None:
        if args.max_steps < 1:
            raise CliError("--max-steps: must be at least 1")
        # A scenario's own config key (engine.scenario), not an engine knob.
        config: dict[str, Any] = dict(base.get("config", {}))
        config["max_steps"] = args.max_steps
        base = cast("BaseScenario", {**base, "config": config})
    return SweepSpec(
        base=base,
        knobs=knobs,
        repeat=args.repeat if args.repeat is not None else (spec.repeat if spec else 1),
        runner=runner,
        cost_model=cost_model,
        name=spec.name if spec else "",
        source=source,
        experiment=args.experiment,
    )


class Progress:
    """`[#####.....] 12/24 points  3.2 s` redrawn in place on a terminal; on a pipe, a line
    every tenth of the way."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.t0 = time.monotonic()
        self.failed = 0

    def __call__(self, res: Any, done: int, total: int) -> None:
        self.failed += res.error is not None
        filled = 30 * done // total
        line = (
            f"[{'#' * filled}{'.' * (30 - filled)}] {done}/{total} points  "
            f"{time.monotonic() - self.t0:.1f} s"
        )
        if self.failed:
            line += f"  ({self.failed} failed)"
        if self.tty:
            self.stream.write("\r" + line)
        elif done == total or done % max(1, total // 10) == 0:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")


def summary_table(results: list[Any], knob_names: list[str]) -> str:
    """Per knob value (mean over repeats): the main figures."""
    from app.lab.catalog import SUMMARY
    from engine.faults import stopped_text

    groups: dict[tuple[Any, ...], list[dict[str, float]]] = {}
    errors = 0
    for res in results:
        if res.error:
            errors += 1
            continue
        groups.setdefault(tuple(res.point.knobs[k] for k in knob_names), []).append(res.metrics)
    head = [*knob_names, "runs", *SUMMARY]
    lines = ["  ".join(f"{h:>14}" for h in head)]
    for combo, runs in groups.items():
        means = [sum(m[k] for m in runs) / len(runs) for k in SUMMARY]
        cells = [*(str(v) for v in combo), str(len(runs)), *(f"{v:.2f}" for v in means)]
        lines.append("  ".join(f"{c:>14}" for c in cells))
    if errors:
        lines.append(f"{errors} run(s) failed: see --out for their errors")
    stopped = [res for res in results if res.stopped and not res.error]
    if stopped:
        lines.append(
            f"{len(stopped)} run(s) INCOMPLETE (their figures cover only what ran), e.g. "
            f"{stopped[0].point.knobs}: {stopped_text(stopped[0].stopped)}"
        )
    return "\n".join(lines)


def _check_out(out: str | None) -> Path | None:
    if not out:
        return None
    path = Path(out)
    if path.suffix.lower() not in (".json", ".csv"):
        raise CliError(f"--out {out}: must end in .json or .csv")
    if not path.parent.resolve().is_dir():
        raise CliError(f"--out {out}: no such directory {path.parent}")
    return path


def write_out(path: Path, results: list[Any], meta: dict[str, Any]) -> None:
    from app.lab.export import csv_text
    from engine.sweep import to_json

    text = csv_text(results) if path.suffix.lower() == ".csv" else to_json(results, meta) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CliError(f"cannot write {path}: {exc.strerror}") from None


def cmd_sweep(args: argparse.Namespace) -> int:
    from app.lab.sources import SourceError
    from engine.faults import STOPPED_EXIT
    from engine.sweep import SweepError
    from engine.sweep_pool import run_sweep

    out = _check_out(args.out)
    if args.workers is not None and args.workers < 1:
        raise CliError("--workers: must be >= 1")
    try:
        spec = build_spec(args)
        total = len(spec.points())
    except (SourceError, SweepError) as exc:
        raise CliError(str(exc)) from None
    workers = args.workers or os.cpu_count() or 1
    print(f"sweep: {total} runs ({spec.runner} runner, {min(workers, total)} workers)",
          file=sys.stderr)  # fmt: skip
    progress = Progress()
    t0 = time.monotonic()
    results = run_sweep(
        spec.base, spec.knobs, spec.repeat, spec.runner, spec.cost_model,
        workers=workers, on_result=progress,
    )  # fmt: skip
    progress.close()
    wall = time.monotonic() - t0
    interrupted = len(results) < total
    stopped = sum(1 for r in results if r.stopped)
    print(summary_table(results, [k.name for k in spec.knobs]))
    if interrupted:
        print(f"interrupted: {len(results)} of {total} runs finished", file=sys.stderr)
    if out is not None:
        meta = {
            "source": spec.source,
            "knobs": spec.knob_dicts(),
            "repeat": spec.repeat,
            "runner": spec.runner,
            "cost_model": spec.cost_model,
            "experiment": spec.experiment,
            "complete": not interrupted and not stopped,
            "wall_s": round(wall, 3),
        }
        write_out(out, results, meta)
        print(f"{len(results)} runs written to {out}", file=sys.stderr)
    print(f"wall time {wall:.2f} s", file=sys.stderr)
    if interrupted:
        return 130
    return STOPPED_EXIT if stopped else 0
