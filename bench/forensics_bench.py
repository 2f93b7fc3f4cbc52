"""Request forensics on a 10,000-request recording: how long GET /api/requests/{req} takes
(app.records.request_life reads only the request's steps and decodes only its slices of
each frame), for the longest-lived request, a median one, preempted ones and a short
one, cold and then cached.

    python -m bench.forensics_bench [--requests 10000] [--json OUT.json]

A `batchscope serve` (sim runner, not paced by the clock, a 3,000-block pool under
pressure) gets the requests in bursts; the bench waits until all finished and the
recording caught up. Target: the long-lived request's life in well under a second.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tools.live_server import LiveServer, live_server, recorder_lag  # noqa: E402

ENV = {
    "BATCHSCOPE_REALTIME": "false",
    "BATCHSCOPE_NUM_GPU_BLOCKS": "3000",
    "BATCHSCOPE_MAX_NUM_SEQS": "256",
    "BATCHSCOPE_MAX_NUM_BATCHED_TOKENS": "2048",
}


def fill(srv: LiveServer, n: int) -> str:
    rng = random.Random(1)
    sid: str = srv.api("GET", "/api/state").json()["session"]
    sent = 0
    while sent < n:
        count = min(256, n - sent)
        body = {"prompt_len": rng.choice([32, 64, 200, 500]), "count": count,
                "max_tokens": rng.choice([20, 100, 300]), "priority": rng.choice([0, 1]),
                "shared_prefix": rng.choice(["none", "system"])}  # fmt: skip
        srv.api("POST", "/api/requests", json=body)
        sent += count
        time.sleep(0.5)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        rows = srv.api("GET", "/api/requests", params={"status": "running,waiting,preempted"})
        if not rows.json() and not recorder_lag(srv):
            return sid
        time.sleep(1)
    raise SystemExit("the session did not finish in 10 minutes")


def timed(srv: LiveServer, sid: str, req: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    life = srv.api("GET", f"/api/requests/{req}", params={"session": sid}).json()
    ms = (time.perf_counter() - t0) * 1000
    return {"req": req, "http_ms": round(ms, 1), "server_ms": life["elapsed_ms"],
            "steps": life["frames"]["scanned"], "cached": bool(life.get("cached"))}  # fmt: skip


def bench(n: int) -> dict[str, Any]:
    with live_server(workload="none", env=ENV) as srv:
        sid = fill(srv, n)
        meta = srv.api("GET", f"/api/sessions/{sid}").json()
        rows = srv.api("GET", f"/api/sessions/{sid}/requests").json()
        span = {r["req"]: (r["finish_step"] or 0) - (r["arrived_step"] or 0) for r in rows}
        ordered = sorted(span, key=span.__getitem__)
        preempted = [r["req"] for r in rows if r["num_preemptions"]][:3]
        picks = {"longest": ordered[-1], "median": ordered[len(ordered) // 2],
                 "shortest": ordered[0]}  # fmt: skip
        picks |= {f"preempted {i}": r for i, r in enumerate(preempted)}
        cold = {name: timed(srv, sid, req) for name, req in picks.items()}
        warm = timed(srv, sid, picks["longest"])
    return {"requests": meta["requests"], "steps": meta["steps"],
            "median_life_steps": median(span.values()), "cold": cold, "cached": warm}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description="request forensics on a large recording")
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args()
    r = bench(args.requests)
    print(
        f"{r['requests']} requests, {r['steps']} steps (median life {r['median_life_steps']} steps)"
    )
    for name, x in r["cold"].items():
        print(
            f"  {name:12} {x['req']:>10}: {x['steps']:5} steps read, server {x['server_ms']:6.1f}"
            f" ms, over HTTP {x['http_ms']:6.1f} ms"
        )
    print(f"  longest again (cached): over HTTP {r['cached']['http_ms']:.1f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1) + "\n")
    return 0 if r["cold"]["longest"]["http_ms"] < 1000 else 1


if __name__ == "__main__":
    sys.exit(main())
