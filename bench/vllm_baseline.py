"""vLLM's own schedule() + update_from_output() per step with N running decodes,
measured on this machine (run with the vLLM venv's python; prints JSON {N: median µs}).
bench/scheduler_bench.py runs it so its ratios compare against a baseline of the same run.
"""

from __future__ import annotations

import json
import statistics
import sys

from vllm.v1.core.sched.scheduler import Scheduler

from bench.vllm_adapter_bench import make, step

STEPS = 200


def main(argv: list[str]) -> int:
    out: dict[int, float] = {}
    for n in (int(a) for a in argv):
        sched = make(Scheduler, n)
        out[n] = statistics.median(step(sched, 0.0)[0] for _ in range(STEPS)) * 1e6
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
