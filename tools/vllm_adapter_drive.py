"""Drive vLLM's real scheduler, observed by batchscope_vllm, through scenarios.

Runs in the vLLM venv with the repository on PYTHONPATH (tests/vllm/test_adapter.py):

    BATCHSCOPE_URL=ws://127.0.0.1:8000/ws/ingest BATCHSCOPE_TOKEN=T \\
        .venv-vllm/bin/python tools/vllm_adapter_drive.py A.json B.json --out-dir DIR

Each scenario gets its own scheduler, built and driven exactly like tools/vllm_reference.py
(same build_scheduler, same step loop), whose class mixes the reference's preemption log
into `batchscope_vllm.ObservedScheduler`, so it streams one dashboard session per scenario.
`--async-scenarios` run through ObservedAsyncScheduler instead (driven in the same strict
schedule/update alternation) and write DIR/<stem>.async.json. DIR/<stem>.json is the
reference result (vLLM's own per-step decisions) plus `observer`: the session id, the last
seq, drops and whether everything was delivered.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from batchscope_vllm import ObservedAsyncScheduler, ObservedScheduler  # noqa: E402
from engine.scenario import load_scenario  # noqa: E402
from tools.vllm_reference import RecordingScheduler, build_scheduler, drive  # noqa: E402


class DriveScheduler(RecordingScheduler, ObservedScheduler):
    """The reference's preemption log on top of the observed scheduler."""

    num_spec_at_init = 0
    """Drafts per step, as vLLM's __init__ reads them from a speculative config (the
    reference has none and sets num_spec_tokens after building): the observer starts,
    and announces, knowing them."""
    num_spec_tokens: int
    """vLLM's Scheduler's (drafts per step)."""

    def _bs_init(self) -> None:
        self.num_spec_tokens = self.num_spec_at_init or self.num_spec_tokens
        super()._bs_init()


class DriveAsyncScheduler(DriveScheduler, ObservedAsyncScheduler):
    """The same over vLLM's AsyncScheduler."""


def _num_spec(scenario: Any) -> int:
    return int(scenario.config.scheduler.num_speculative_tokens)


def run_one(path: Path, use_async: bool, close_timeout: float) -> dict[str, Any]:
    scenario = load_scenario(path)
    os.environ["BATCHSCOPE_NAME"] = f"vllm {scenario.name}"
    base = DriveAsyncScheduler if use_async else DriveScheduler
    cls = type(base.__name__, (base,), {"num_spec_at_init": _num_spec(scenario)})
    sched: Any = build_scheduler(scenario, cls)
    if sched.batchscope is None:
        raise SystemExit("set BATCHSCOPE_URL (and BATCHSCOPE_TOKEN)")
    result = drive(sched, scenario)
    sender = sched.batchscope
    delivered = sched.close(close_timeout)
    result["observer"] = {
        "session": sender.session,
        "last_seq": sender.seq,
        "frames": len(sender.frames.history),
        "dropped": sender.dropped,
        "errors": sender.errors,
        "observer_errors": sched.observer_errors,
        "delivered": delivered,
        "async": use_async,
    }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="*", type=Path)
    parser.add_argument("--async-scenarios", nargs="*", type=Path, default=[])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--close-timeout", type=float, default=20.0)
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    runs = [(p, False) for p in args.scenarios] + [(p, True) for p in args.async_scenarios]
    for path, use_async in runs:
        result = run_one(path, use_async, args.close_timeout)
        out = args.out_dir / f"{path.stem}{'.async' if use_async else ''}.json"
        out.write_text(json.dumps(result, indent=1) + "\n")
        obs = result["observer"]
        print(
            f"{path.stem}: {result['num_steps']} steps, session {obs['session']}, "
            f"{obs['last_seq']} frames, delivered={obs['delivered']}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
