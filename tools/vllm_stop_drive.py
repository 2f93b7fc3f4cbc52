"""Stop vLLM's real scheduler, observed, with requests in flight, as vLLM stops it.

Runs in a vLLM venv with the repository on PYTHONPATH (tests/vllm/test_adapter_stop.py):

    BATCHSCOPE_URL=ws://127.0.0.1:8000/ws/ingest BATCHSCOPE_TOKEN=T \\
        .venv-vllm/bin/python tools/vllm_stop_drive.py SCENARIO.json --steps N --out-dir DIR

Each case is a session of its own: the scenario built and driven like
tools/vllm_reference.py for N steps (its requests still running and waiting), one more
request added after the last step, then the stop:

* `signal`: a SIGTERM to this process. A handler standing in for vLLM's engine core's is
  installed before the scheduler is built, so the adapter puts its own in front of it, as
  in vLLM's engine-core process (batchscope_vllm/stop.py). Then what vLLM's engine core
  does next with `--shutdown-timeout 0`: `finish_requests(None, FINISHED_ABORTED)`, and
  the scheduler's `shutdown()`.
* `shutdown`: no signal handler to chain (an in-process LLM): the same abort, then
  `shutdown()`, where the adapter ends the session.
* `shutdown.async`: the same through vLLM's AsyncScheduler (batches still in flight).

Writes DIR/<case>.json: the session and its last seq, what vLLM held at the stop (running,
waiting), the ids its finish_requests aborted, and the steps run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher  # noqa: E402
from vllm.v1.request import RequestStatus  # noqa: E402

from engine.scenario import Scenario, load_scenario  # noqa: E402
from tools.vllm_adapter_drive import DriveAsyncScheduler, DriveScheduler  # noqa: E402
from tools.vllm_drive import Driver  # noqa: E402
from tools.vllm_reference import _rejection_reason, build_scheduler  # noqa: E402

CASES = ("signal", "shutdown", "shutdown.async")
LATE = "late"
"""The request added after the last step (never scheduled)."""


def _ids(aborted: list[Any]) -> list[str]:
    """finish_requests' answer as ids (0.20: (id, client index) pairs; later: Requests)."""
    return [a[0] if isinstance(a, tuple) else a.request_id for a in aborted]


def run_case(scenario: Scenario, case: str, steps: int) -> dict[str, Any]:
    os.environ["BATCHSCOPE_NAME"] = f"stop {case}"
    use_async = case.endswith(".async")
    seen: list[int] = []
    if case == "signal":
        signal.signal(signal.SIGTERM, lambda signum, _frame: seen.append(signum))
    else:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    cls = DriveAsyncScheduler if use_async else DriveScheduler
    sched: Any = build_scheduler(dataclasses.replace(scenario, max_steps=steps), cls)
    sender = sched.batchscope
    if sender is None:
        raise SystemExit("set BATCHSCOPE_URL (and BATCHSCOPE_TOKEN)")
    cc = scenario.config.cache
    hasher = get_request_block_hasher(cc.block_size, sha256) if cc.enable_prefix_caching else None
    driver = Driver(
        sched, dataclasses.replace(scenario, max_steps=steps), hasher, _rejection_reason
    )
    result = driver.run(use_async)
    late = dataclasses.replace(scenario.requests[0], id=LATE, arrival_step=steps)
    driver.add_arrivals(steps, [late])
    held = {
        "running": [r.request_id for r in sched.running],
        "waiting": [r.request_id for r in sched.waiting],
    }
    deadline = time.monotonic() + 30
    while sender.connects == 0 and time.monotonic() < deadline:
        time.sleep(0.05)  # (streaming: the stop handler's wait is for the socket)
    if case == "signal":
        os.kill(os.getpid(), signal.SIGTERM)
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
    aborted = _ids(sched.finish_requests(None, RequestStatus.FINISHED_ABORTED))
    sched.shutdown()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return {
        "case": case,
        "session": sender.session,
        "last_seq": sender.seq,
        "delivered": sender.delivered(),
        "signalled": seen,
        "held": held,
        "aborted": aborted,
        "num_steps": result["num_steps"],
        "in_flight_batches": len(driver.queue),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", type=Path)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    parser.add_argument("--out-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    scenario = load_scenario(args.scenario)
    for case in args.cases:
        result = run_case(scenario, case, args.steps)
        (args.out_dir / f"{case}.json").write_text(json.dumps(result))
        print(f"{case}: held {result['held']}, aborted {result['aborted']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
