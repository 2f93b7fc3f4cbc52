"""`batchscope simulate` (a scenario file step by step) and `batchscope calibrate` (fit the
SimRunner's cost model on the torch runner): the engine offline, no dashboard."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from app.cli.common import (
    CliError,
    add_loop_flags,
    add_runner_flags,
    loop_overrides,
    make_runner_from_args,
)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sim = sub.add_parser(
        "simulate",
        help="run a scenario file step by step",
        description="Exit status: 0 every request ran to its end (finished or rejected); "
        "1 the run stopped where vLLM's scheduler would fail an assertion; 3 the run was cut "
        "short (the scenario's max_steps, --time-limit) with requests unfinished; 2 bad input.",
    )
    sim.add_argument("file", help="scenario JSON (see docs/scenarios.md)")
    sim.add_argument(
        "--out",
        metavar="RESULT.json",
        help="write the step-by-step result here (written as the run goes)",
    )
    sim.add_argument("--table", action="store_true", help="print the seed-style step table")
    sim.add_argument(
        "--time-limit",
        type=float,
        metavar="SECONDS",
        help="stop after this much wall time (the result then says it stopped, exit 3)",
    )
    sim.add_argument(
        "--cost-model",
        metavar="FILE|PRESET",
        help="SimRunner step times: a file from calibrate, or a preset like h100:llama-3-8b",
    )
    add_runner_flags(sim, default="sim")
    add_loop_flags(sim)
    sim.set_defaults(run=cmd_simulate)

    cal = sub.add_parser("calibrate", help="fit the SimRunner's cost model on the torch runner")
    cal.add_argument("--out", metavar="FILE", default="data/cost_model.json")
    cal.add_argument(
        "--roofline",
        action="store_true",
        help="fit the roofline (peak FLOP/s, bandwidth, launch overhead) instead of the "
        "linear model",
    )
    cal.add_argument("--model", metavar="DIR", help="local Llama-family checkpoint directory")
    cal.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    cal.add_argument("--repeats", type=int, default=3)
    cal.set_defaults(run=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from engine.config import CacheConfig, EngineConfig, SchedulerConfig
    from engine.runner.calibrate import (
        fit_cost_model,
        fit_roofline,
        measure_step_times,
        model_spec,
    )

    if args.repeats < 1:
        raise CliError("--repeats: must be >= 1")
    config = EngineConfig(
        SchedulerConfig(max_num_batched_tokens=4096, max_num_seqs=64, max_model_len=4096),
        CacheConfig(block_size=16, num_gpu_blocks=1025),
    )
    args.runner = "torch"
    runner = make_runner_from_args(args, config)
    samples = measure_step_times(runner, repeats=args.repeats)
    describe = runner.describe()
    if args.roofline:
        roof = fit_roofline(samples, model_spec(describe))
        fitted = roof.as_dict()
        note = f"knee at {roof.knee_tokens():.0f} tokens/step"
    else:
        fitted = asdict(fit_cost_model(samples))
        note = ", ".join(f"{k}={v}" for k, v in fitted.items())
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {**fitted, "runner": describe}
    out.write_text(json.dumps(payload, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"cost model written to {out} ({note})")
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from engine.faults import STOPPED_EXIT, failure_text, stopped_text
    from engine.scenario import ScenarioError, load_scenario
    from engine.simulate import TABLE_HEADER, stream_scenario, table_footer, table_line

    try:
        # The flags join the file's knobs before the one validation: the config is checked
        # as the release it runs as, never as the file's (or the newest) first.
        scenario = load_scenario(args.file, loop_overrides(args))
    except ScenarioError as exc:
        raise CliError(str(exc)) from None
    if args.time_limit is not None and not args.time_limit > 0:
        raise CliError("--time-limit: must be > 0 seconds")
    runner = make_runner_from_args(args, scenario.config)
    show = args.table or not args.out
    on_step = (lambda rec: _print_line(table_line(rec))) if show else None
    if show:
        _print_line(TABLE_HEADER)
    # The result is written as the run goes (engine.result_json): memory stays what the
    # engine holds however long the run.
    if args.out:
        out = Path(args.out)
        tmp = out.with_name(out.name + ".tmp")
        try:
            with tmp.open("w", encoding="utf-8") as fh:
                result = stream_scenario(scenario, fh, runner, args.time_limit, on_step)
            tmp.replace(out)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise CliError(f"cannot write {out}: {exc.strerror}") from None
    else:
        result = stream_scenario(scenario, None, runner, args.time_limit, on_step)
    if show:
        _print_line(table_footer(result))
    failure = result.get("failure")
    if failure:
        # vLLM's engine would stop here too: the run is not complete, and says so.
        print(f"batchscope simulate: {failure_text(failure)}", file=sys.stderr)
        return 1
    if not result["complete"]:
        print(f"batchscope simulate: {stopped_text(result['stopped'])}", file=sys.stderr)
        return STOPPED_EXIT
    return 0


def _print_line(text: str) -> None:
    """A line of the table as the run goes; if the reader has gone (`simulate | head`),
    the rest of the table goes nowhere and the run (and its --out) still completes."""
    try:
        print(text)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
