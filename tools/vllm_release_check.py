"""Check the adapter in process against any vLLM release, without a venv of its own.

    .venv-vllm/bin/python tools/vllm_release_check.py 0.24.0 [0.27.0 ...] [--dir DIR]

Each release's wheel is unpacked (`pip install --no-deps --target`, ~300 MB each, kept in
--dir, default /tmp/vllm-releases) and put first on the path of this interpreter, whose
venv lends it the rest (torch and the scheduler's imports: .venv-vllm for 0.20-0.30,
.venv-vllm-033 for 0.31+). Then, in a child process on that release, the shipped
scenarios run through vLLM's real scheduler observed by batchscope_vllm (its sender
streams to a dead address and keeps every frame): each recorded step must equal vLLM's
decision (plan, preemptions, finishes, queue counts, a waiting reason per waiting
request); and tools/vllm_fault_drive.py's cases (a failure in each hook, both loops)
must leave vLLM's decisions unchanged. Prints one line per release; exit status 1 if any
fails. The tests/vllm suite does the same, and more, for the releases with venvs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
SCENARIOS: tuple[str, ...] = ("seed", "kv_pressure", "kv_pressure_async", "long_prompt_vs_decodes")
SCENARIOS += ("priority",)
SCENARIOS += ("shared_prefixes", "spec_decode", "async_placeholders")


def _unpack(release: str, where: Path) -> Path:
    target = where / release
    if not (target / "vllm").is_dir():
        pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        pip += ["--no-deps", "--target", str(target), f"vllm=={release}"]
        subprocess.run(pip, check=True)
    return target


def _observer_steps(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """vLLM's steps as the observer numbers them (idle loop turns are not steps)."""
    return [s for s in steps if s["scheduled"] or s["updated_step"] is not None]


def _mismatch(steps: list[dict[str, Any]], its: list[dict[str, Any]]) -> str | None:
    if len(steps) != len(its):
        return f"{len(its)} frames for {len(steps)} steps"
    for want, it in zip(steps, its, strict=True):
        got = {
            "plan": [(i["req"], i["n"]) for i in it["scheduled"]],
            "preempted": [p["req"] for p in it["preempted"]],
            "finished": [f["req"] for f in it["finished"]],
            "queues": (it["queues"]["running"], it["queues"]["waiting"]),
            "reasons": len(it["waiting_reasons"]),
        }
        expect = {
            "plan": list(want["scheduled"].items()),
            "preempted": want["preempted_req_ids"],
            "finished": want["finished_req_ids"],
            "queues": (want["num_running"], want["num_waiting"]),
            "reasons": want["num_waiting"],
        }
        for key, value in expect.items():
            if got[key] != value:
                return f"step {want['step']}: {key} {got[key]} != vLLM's {value}"
    return None


def inner() -> int:
    """On the release (this process's path): the frames and fault checks."""
    os.environ["BATCHSCOPE_URL"] = "ws://127.0.0.1:9/ws/ingest"  # nothing listens
    from vllm import __version__

    from engine.scenario import load_scenario
    from tools.vllm_adapter_drive import DriveAsyncScheduler, DriveScheduler
    from tools.vllm_fault_drive import HOOKS, run_case
    from tools.vllm_reference import build_scheduler, drive

    problems: list[str] = []
    for name in SCENARIOS:
        scenario = load_scenario(REPO_ROOT / "scenarios" / f"{name}.json")
        cls = DriveAsyncScheduler if scenario.config.scheduler.async_scheduling else DriveScheduler
        sched: Any = build_scheduler(scenario, cls)
        result = drive(sched, scenario)
        sender = sched.batchscope
        sched.close(0.5)
        frames = [json.loads(text) for _, text in sender.frames.history]
        its = [f["data"] for f in frames if f["type"] == "iteration"]
        why = _mismatch(_observer_steps(result["steps"]), its)
        if why or sched.observer_errors:
            problems.append(f"{name}: {why or 'observer errors'}")
    fault = load_scenario(REPO_ROOT / "scenarios" / "kv_pressure.json")
    for use_async in (False, True):
        for hook in HOOKS:
            case = run_case(fault, hook, use_async)
            if not (case["identical"] and case["observer_errors"] == 1 and case["detached"]):
                problems.append(f"fault {hook}{' async' if use_async else ''}: {case}")
    verdict = "ok" if not problems else "FAILED: " + "; ".join(problems)
    cases = f"{len(SCENARIOS)} scenarios, {2 * len(HOOKS)} fault cases"
    print(f"vLLM {__version__}: {cases}: {verdict}")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("releases", nargs="*")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/vllm-releases"))
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner:
        return inner()
    rc = 0
    for release in args.releases:
        target = _unpack(release, args.dir)
        env = {**os.environ, "PYTHONPATH": f"{target}:{REPO_ROOT}", "VLLM_LOGGING_LEVEL": "ERROR"}
        done = subprocess.run(
            [sys.executable, __file__, "--inner"], env=env, capture_output=True, text=True
        )
        lines = [x for x in done.stdout.splitlines() if x.startswith("vLLM ")]
        print(lines[-1] if lines else f"vLLM {release}: did not run\n{done.stderr[-2000:]}")
        rc |= done.returncode
    return rc


if __name__ == "__main__":
    sys.exit(main())
