"""Commands against the local engine process: the round trip of a control command (HTTP
POST to the dashboard -> link -> engine thread at its next step boundary -> reply after
the frames it made) at three engine rates: idle (no requests), paced (a realtime
simulation) and flat out (`BATCHSCOPE_REALTIME=false`, 256 long requests). Prints p50 and
p99 of pause / resume / step round trips per rate and the ratio to idle measured in the
same run. Target: p99 <= 100 ms at every rate (issue: commands are never starved).

Run: `python -m bench.command_bench [--rounds N] [--rates idle,paced,flat-out]`.
"""

from __future__ import annotations

import argparse
import statistics
import time

from tests.conftest import LiveServer, server_process

LOAD = {"prompt_len": 40, "max_tokens": 1000, "count": 256}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _round_trips(server: LiveServer, rounds: int, loaded: bool) -> list[float]:
    out: list[float] = []
    with server.client() as c:
        if loaded:
            c.post("/api/requests", json=LOAD)
            time.sleep(2.0)
        for i in range(rounds):
            for path in ("/api/pause", "/api/step" if i % 2 else "/api/resume"):
                t0 = time.perf_counter()
                r = c.post(path, json={} if path == "/api/step" else None, timeout=60)
                out.append(time.perf_counter() - t0)
                r.raise_for_status()
            c.post("/api/resume", timeout=60)
            time.sleep(0.05)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--rates", default="idle,paced,flat-out", help="comma-separated")
    args = ap.parse_args()
    rates = {
        "idle": ({"realtime": "true"}, False),
        "paced": ({"realtime": "true"}, True),
        "flat-out": ({"realtime": "false"}, True),
    }
    chosen = args.rates.split(",")
    if args.rounds < 1 or not chosen or any(r not in rates for r in chosen):
        ap.error(f"--rounds must be >= 1 and --rates a list of {', '.join(rates)}")
    results: dict[str, list[float]] = {}
    for name in chosen:
        env, loaded = rates[name]
        with server_process("sqlite://", **env) as server:
            results[name] = _round_trips(server, args.rounds, loaded)
    idle_p99 = _pct(results["idle" if "idle" in results else chosen[0]], 0.99)
    print(f"command round trips ({args.rounds} rounds of pause + resume/step per rate)")
    for name, values in results.items():
        p50, p99 = statistics.median(values) * 1e3, _pct(values, 0.99) * 1e3
        verdict = "ok" if p99 <= 100 else "over the 100 ms target"
        print(
            f"  {name:9s} p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  "
            f"(p99 x{p99 / (idle_p99 * 1e3):.2f} of {'idle' if 'idle' in results else chosen[0]})"
            f"  {verdict}"
        )


if __name__ == "__main__":
    main()
