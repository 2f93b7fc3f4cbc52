"""What batchscope_vllm.ObservedScheduler adds to vLLM's own schedule() + update_from_output().

Run with the vLLM venv (tools/setup_vllm_venv.sh), from the repository root:

    .venv-vllm/bin/python bench/vllm_adapter_bench.py [--running 256] [--steps 200]
        [--bus nats://127.0.0.1:4222]   (the bus sender; nats-py in the vLLM venv)

Both schedulers are vLLM 0.20.0's, built like tools/vllm_reference.py, holding N running
decodes (no request finishes during the run). The observed one streams to a dead URL, so
its sender thread builds, encodes and buffers every frame while retrying the connection.
Per step it reports the median schedule+update wall time of each, and the median CPU time
the engine thread spent in them (immune to other processes on a busy machine), in three
settings:

* `hooks only`: the sender thread is not started; its frames are built between steps,
  untimed. This is what the hooks add to the engine thread itself.
* `live, forward gap`: a live sender; a sleep between schedule() and update_from_output()
  stands in for the model's forward pass, where a real engine waits on the GPU with the GIL
  released and the sender thread gets to run.
* `live, back to back`: a live sender and no pause, so it competes for the GIL with the
  timed calls (a worst case); also its own CPU time per step (process CPU time not spent on
  the engine thread).

`hooks only` and `forward gap` step the two schedulers in turn; `back to back` alternates
runs of `--steps`.

`--arrivals K` (back to back only): before each step K new requests of `--arrival-tokens`
tokens arrive, and are aborted after it (the running set stays the same), so the sender
also builds arrivals, with their prompts' block hashes (protocol.blocks), and aborts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
os.environ["BATCHSCOPE_URL"] = "ws://127.0.0.1:9/ws/ingest"  # nothing listens there
os.environ.setdefault("BATCHSCOPE_TOKEN", "bench")

from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402

from batchscope_vllm import ObservedScheduler  # noqa: E402
from batchscope_vllm.sender import Sender  # noqa: E402
from engine.scenario import parse_scenario, prompt_tokens  # noqa: E402
from tools.vllm_drive import plain_output  # noqa: E402
from tools.vllm_reference import build_scheduler  # noqa: E402

PROMPT_LEN = 128


def make(cls: type[Scheduler], running: int) -> Scheduler:
    """A scheduler of `cls` whose next step is `running` decodes."""
    config = {
        "max_num_batched_tokens": 8192,
        "max_num_seqs": running,
        "max_model_len": 4096,
        "block_size": 16,
        "num_gpu_blocks": running * 256 + 1,
        "enable_prefix_caching": True,
    }
    scenario = parse_scenario({"name": "bench", "config": config, "requests": []})
    sched = build_scheduler(scenario, cls)
    hasher = get_request_block_hasher(16, sha256)
    for i in range(running):
        params = SamplingParams(max_tokens=3500, ignore_eos=True, temperature=0.0)
        request = Request(
            request_id=f"r{i}",
            prompt_token_ids=prompt_tokens(i, PROMPT_LEN),
            sampling_params=params,
            pooling_params=None,
            arrival_time=float(i),
            block_hasher=hasher,
        )
        sched.add_request(request)
    while sched.get_request_counts()[1] or any(
        r.num_computed_tokens < r.num_tokens - 1 for r in sched.running
    ):
        step(sched, 0.0)
    return sched


def step(sched: Scheduler, gap: float) -> tuple[float, float]:
    """One step: (wall s, engine-thread CPU s) spent in schedule() + update_from_output()."""
    c0, t0 = time.thread_time(), time.perf_counter()
    out = sched.schedule()
    t1, c1 = time.perf_counter(), time.thread_time()
    mro = plain_output(sched, out)
    if gap:
        time.sleep(gap)
    c2, t2 = time.thread_time(), time.perf_counter()
    sched.update_from_output(out, mro)
    t3, c3 = time.perf_counter(), time.thread_time()
    return (t1 - t0) + (t3 - t2), (c1 - c0) + (c3 - c2)


def medians(samples: list[tuple[float, float]]) -> tuple[float, float]:
    """(median wall µs, median CPU µs)."""
    return (
        statistics.median(s[0] for s in samples) * 1e6,
        statistics.median(s[1] for s in samples) * 1e6,
    )


def interleaved(
    plain: Scheduler, observed: Scheduler, steps: int, gap: float, drain: Sender | None = None
) -> tuple[tuple[float, float], tuple[float, float]]:
    """Medians for plain and observed, stepping the two in turn (shared drift). `drain`:
    an unstarted sender whose frames are built here, between steps, untimed."""
    a: list[tuple[float, float]] = []
    b: list[tuple[float, float]] = []
    for _ in range(steps):
        a.append(step(plain, gap))
        b.append(step(observed, gap))
        while drain is not None and drain.queue:
            drain._pump(0)
    return medians(a), medians(b)


class Arrivals:
    """K requests of `tokens` prompt tokens added before a step, aborted after it."""

    def __init__(self, per_step: int, tokens: int) -> None:
        self.per_step, self.tokens = per_step, tokens
        self.count = 0

    def step(self, sched: Scheduler) -> tuple[float, float]:
        ids = []
        for _ in range(self.per_step):
            self.count += 1
            req_id = f"a{self.count}"
            params = SamplingParams(max_tokens=16, temperature=0.0)
            sched.add_request(
                Request(
                    request_id=req_id,
                    prompt_token_ids=prompt_tokens(self.count, self.tokens),
                    sampling_params=params,
                    pooling_params=None,
                    arrival_time=time.time(),
                )
            )
            ids.append(req_id)
        timed = step(sched, 0.0)
        if ids:
            sched.finish_requests(ids, RequestStatus.FINISHED_ABORTED)
        return timed


def back_to_back(
    sched: Scheduler, steps: int, arrivals: Arrivals | None = None
) -> tuple[tuple[float, float], float]:
    """(medians, CPU µs per step off the engine thread) over `steps` consecutive steps."""
    one = arrivals.step if arrivals is not None else (lambda s: step(s, 0.0))
    for _ in range(10):
        one(sched)
    cpu0, main0 = time.process_time(), time.thread_time()
    samples = [one(sched) for _ in range(steps)]
    time.sleep(0.2)  # let the sender finish this run's frames
    other = (time.process_time() - cpu0) - (time.thread_time() - main0)
    return medians(samples), max(other, 0.0) / steps * 1e6


def unstarted(running: int) -> Scheduler:
    """An ObservedScheduler whose sender thread is not started (interleaved() drains it)."""
    start = Sender.start
    Sender.start = lambda _self: None  # type: ignore[method-assign,assignment]
    try:
        return make(ObservedScheduler, running)
    finally:
        Sender.start = start  # type: ignore[method-assign]


def report(label: str, base: tuple[float, float], obs: tuple[float, float]) -> None:
    print(
        f"{label:>18}: wall vLLM {base[0]:7.1f} us, observed {obs[0]:7.1f} us "
        f"({(obs[0] / base[0] - 1) * 100:+5.1f}%) | engine-thread CPU vLLM {base[1]:7.1f} us, "
        f"observed {obs[1]:7.1f} us ({(obs[1] / base[1] - 1) * 100:+5.1f}%)"
    )


def _median_of(rows: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--running", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--gap-ms", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--bus",
        metavar="NATS_URL",
        help="observe through the fleet bus sender (BATCHSCOPE_BUS; batchscope_vllm/bus.py) "
        "publishing to this NATS server, not the websocket sender to a dead URL",
    )
    parser.add_argument("--arrivals", type=int, default=0, metavar="K")
    parser.add_argument("--arrival-tokens", type=int, default=2048, metavar="N")
    args = parser.parse_args()
    if args.bus:
        os.environ["BATCHSCOPE_BUS"] = args.bus
    n, steps = args.running, args.steps * args.rounds
    print(f"{n} running decodes, schedule()+update_from_output() per step, medians:")
    plain, hooks = make(Scheduler, n), unstarted(n)
    drain: Sender = hooks.batchscope  # type: ignore[attr-defined]
    report("hooks only", *interleaved(plain, hooks, steps, 0.0, drain=drain))
    hooks.close(0.1)  # type: ignore[attr-defined]
    observed = make(ObservedScheduler, n)
    report(f"live, gap {args.gap_ms:g} ms", *interleaved(plain, observed, steps, args.gap_ms / 1e3))
    base, obs, cpu = [], [], []
    arrivals = Arrivals(args.arrivals, args.arrival_tokens) if args.arrivals else None
    if arrivals is not None:
        print(f"back to back: {args.arrivals} arrivals of {args.arrival_tokens} tokens a step")
    for _ in range(args.rounds):  # alternate runs to share drift (clock, cache) fairly
        base.append(back_to_back(plain, args.steps, arrivals)[0])
        medians_obs, sender_us = back_to_back(observed, args.steps, arrivals)
        obs.append(medians_obs)
        cpu.append(sender_us)
    report("live, back to back", _median_of(base), _median_of(obs))
    sender = observed.batchscope  # type: ignore[attr-defined]
    print(
        f"sender thread: {statistics.median(cpu):.1f} us CPU/step; {sender.seq} frames built, "
        f"{sender.dropped} dropped"
        + (f", {type(sender).__name__} to {args.bus}" if args.bus else " (no dashboard)")
    )
    observed.close(0.5)  # type: ignore[attr-defined]
    if args.bus:
        print(
            f"bus: {sender.summaries_sent} step summaries published, {sender.summaries_lost} lost"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
