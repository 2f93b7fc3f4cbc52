"""Check the adapter in process against any vLLM release, without a venv of its own.

    .venv-vllm/bin/python tools/vllm_release_check.py 0.24.0 [0.27.0 ...] [--dir DIR]

Each release's wheel is unpacked (`pip install --no-deps --target`, ~300 MB each, kept in
--dir, default /tmp/vllm-releases) and put first on the path of this interpreter, whose
venv lends it the rest (torch and the scheduler's imports: .venv-vllm for 0.20-0.29,
.venv-vllm-033 for 0.30+). Then, in a child process on that release, the shipped
scenarios run through the release's own engine loops, `EngineCore.step` and
`EngineCore.step_with_batch_queue` (speculative ones with their drafts in both), with
the adapter installed by class name as `--scheduler-cls` installs it and a stand-in
model (tools/vllm_engine_drive.py; its sender streams to a dead address and keeps every
frame): each recorded step must equal vLLM's decision (plan, preemptions, finishes,
queue counts, a waiting reason per waiting request), with no observer error and no
degraded observation; and a failure in each hook, in both loops, must leave vLLM's
decisions unchanged. Prints one line per release; exit status 1 if any fails. The
tests/vllm suite does more for the releases with venvs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

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


def inner() -> int:
    """On the release (this process's path): the adapter in the release's own engine
    loops (tools/vllm_engine_drive.py): each scenario in the sync loop and behind the
    batch queue, speculative ones with their drafts in both; then a failure in each
    observer hook, in both loops."""
    import logging

    os.environ["BATCHSCOPE_URL"] = "ws://127.0.0.1:9/ws/ingest"  # nothing listens
    logging.getLogger("batchscope_vllm").setLevel(logging.CRITICAL)  # the injected faults
    from vllm import __version__

    from engine.scenario import load_scenario
    from tools.vllm_engine_drive import fault_case, observe
    from tools.vllm_fault_drive import HOOKS

    problems: list[str] = []
    degraded: set[str] = set()
    runs = 0
    for name in SCENARIOS:
        scenario = load_scenario(REPO_ROOT / "scenarios" / f"{name}.json")
        for async_loop in (False, True):
            runs += 1
            why, skipped = observe(scenario, async_loop)
            degraded.update(skipped)
            if why:
                problems.append(f"{name} ({LOOPS[async_loop]}): {why}")
    fault = load_scenario(REPO_ROOT / "scenarios" / "kv_pressure.json")
    for async_loop in (False, True):
        for hook in HOOKS:
            why = fault_case(fault, async_loop, hook)
            if why:
                problems.append(f"fault {hook} ({LOOPS[async_loop]}): {why}")
    verdict = "ok" if not degraded else f"degraded ({', '.join(sorted(degraded))})"
    if problems:
        verdict = "FAILED: " + "; ".join(problems)
    cases = f"{runs} engine-loop runs, {2 * len(HOOKS)} fault cases"
    print(f"vLLM {__version__}: {cases}: {verdict}")
    return 1 if problems else 0


LOOPS = {False: "EngineCore.step", True: "EngineCore.step_with_batch_queue"}


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
