"""Commands against the local engine process: the round trip of a control command (HTTP
POST to the dashboard -> link -> engine thread at its next step boundary -> reply after
the frames it made) at three engine rates: idle (no requests), paced (a realtime
simulation) and flat out (`BATCHSCOPE_REALTIME=false`, 256 long requests). Each round
times pause (of a running engine), step, resume, a knob change, an inject and an abort,
and a plain `GET /healthz` beside them: the floor this machine sets now (on a loaded box
every answer is slow; a command should cost about what that GET does). Prints p50 and
p99 per rate, the worst command kind and the load average. Target: p99 <= 100 ms at every
rate (issue: commands are never starved).

`--baseline ROOT` also runs the server of another checkout (e.g. main) at each rate, the
two alternating back to back (`--repeat` times), and prints baseline/this ratios. On a
machine whose load swings from one run to the next, `--paired` runs both servers at once
and interleaves their rounds instead: each meets the same load (and the other's).

Run: `python -m bench.command_bench [--rounds N] [--rates idle,paced,flat-out]
[--baseline /path/to/main [--paired]] [--repeat K] [--db file|memory]`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.conftest import ROOT, TOKEN, free_port, wait_healthy
from tests.lifeline import die_with_us

LOAD = {"prompt_len": 40, "max_tokens": 1000, "count": 256}
ONE = {"prompt_len": 8, "max_tokens": 1000, "count": 1}
RATES = {"idle": ("true", False), "paced": ("true", True), "flat-out": ("false", True)}
"""rate -> (BATCHSCOPE_REALTIME, loaded)."""
TARGET_MS = 100.0


@dataclass
class Run:
    commands: dict[str, list[float]] = field(default_factory=dict)
    """kind -> round trips (s)."""
    healthz: list[float] = field(default_factory=list)
    load: float = 0.0
    """The 1-minute load average when the run ended."""

    def all(self) -> list[float]:
        return [t for times in self.commands.values() for t in times]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextlib.contextmanager
def _server(root: Path, realtime: str, db: str) -> Iterator[str]:
    """`batchscope serve` from checkout `root` in its own process; yields its URL."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="command-bench-") as tmp:
        url_db = "sqlite://" if db == "memory" else f"sqlite:///{tmp}/bench.db"
        env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHSCOPE_")}
        env.update({"BATCHSCOPE_REALTIME": realtime, "PYTHONPATH": str(root)})
        cmd = [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--runner"]
        cmd += ["sim", "--workload", "none", "--token", TOKEN, "--database-url", url_db]
        with open(Path(tmp) / "server.log", "w") as log:
            proc = subprocess.Popen(
                cmd, env=env, cwd=root, stdout=log, stderr=log, preexec_fn=die_with_us()
            )
            url = f"http://127.0.0.1:{port}"
            try:
                if not wait_healthy(proc, url, 60):
                    raise RuntimeError(f"the server from {root} did not start")
                yield url
            finally:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()


def _timed(run: Run, kind: str, c: httpx.Client, path: str, **kw: object) -> httpx.Response:
    t0 = time.perf_counter()
    r = c.post(path, timeout=60, **kw)  # type: ignore[arg-type]
    run.commands.setdefault(kind, []).append(time.perf_counter() - t0)
    if r.status_code >= 400 and not (kind == "abort" and r.status_code == 404):
        r.raise_for_status()  # an abort of a request that already ended is still answered
    return r


def _round(run: Run, c: httpx.Client, i: int) -> None:
    _timed(run, "pause", c, "/api/pause")
    _timed(run, "step", c, "/api/step", json={})
    _timed(run, "resume", c, "/api/resume")
    knob = {"max_num_batched_tokens": 264 if i % 2 == 0 else 256}
    _timed(run, "knobs", c, "/api/config", json=knob)
    req_id = _timed(run, "inject", c, "/api/requests", json=ONE).json()["req_ids"][0]
    _timed(run, "abort", c, f"/api/requests/{req_id}/abort")
    t0 = time.perf_counter()
    c.get("/healthz")  # a 503 (unhealthy: a loaded box's recorder lags) is an answer too
    run.healthz.append(time.perf_counter() - t0)


def _measure(urls: list[str], rounds: int, loaded: bool) -> list[Run]:
    """Rounds against each server in `urls` (all up at once: their rounds interleave, the
    order alternating, so both meet the same machine at the same time)."""
    runs = [Run() for _ in urls]
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with contextlib.ExitStack() as stack:
        clients = [
            stack.enter_context(httpx.Client(base_url=u, headers=headers, timeout=60)) for u in urls
        ]
        if loaded:
            for c in clients:
                c.post("/api/requests", json=LOAD).raise_for_status()
            time.sleep(2.0)
        for i in range(-1, rounds):
            order = list(range(len(urls)))
            for k in order if i % 2 == 0 else reversed(order):
                if i == 0:  # round -1 warmed up (first calls build models, import lazily)
                    runs[k].commands.clear()
                    runs[k].healthz.clear()
                _round(runs[k], clients[k], i)
            time.sleep(0.05)
    for run in runs:
        run.load = os.getloadavg()[0]
    return runs


def _line(label: str, run: Run) -> str:
    values = run.all()
    p50, p99 = statistics.median(values) * 1e3, _pct(values, 0.99) * 1e3
    worst = max(run.commands, key=lambda k: _pct(run.commands[k], 0.99))
    h50, h99 = statistics.median(run.healthz) * 1e3, _pct(run.healthz, 0.99) * 1e3
    verdict = "ok" if p99 <= TARGET_MS else f"over {TARGET_MS:g} ms"
    return (
        f"  {label:20s} p50 {p50:6.1f}  p99 {p99:6.1f} ms  {verdict:12s} "
        f"worst {worst:6s} p99 {_pct(run.commands[worst], 0.99) * 1e3:6.1f}  "
        f"| GET /healthz p50 {h50:5.1f} p99 {h99:6.1f}  | load {run.load:5.2f}"
    )


def _ratio(base: list[Run], this: list[Run]) -> str:
    b = [t for r in base for t in r.all()]
    a = [t for r in this for t in r.all()]
    p50 = statistics.median(b) / statistics.median(a)
    p99 = _pct(b, 0.99) / _pct(a, 0.99)
    return f"  {'baseline / this':20s} p50 x{p50:.2f}  p99 x{p99:.2f}  (all runs pooled)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--rates", default="idle,paced,flat-out", help="comma-separated")
    ap.add_argument("--baseline", type=Path, help="another checkout's root to compare with")
    ap.add_argument("--repeat", type=int, default=1, help="runs per rate (and tree)")
    ap.add_argument("--db", choices=("file", "memory"), default="file")
    ap.add_argument(
        "--paired",
        action="store_true",
        help="with --baseline: both servers up at once, their rounds interleaved",
    )
    args = ap.parse_args()
    chosen = args.rates.split(",")
    if args.rounds < 1 or args.repeat < 1 or any(r not in RATES for r in chosen):
        ap.error(f"--rounds/--repeat must be >= 1 and --rates a list of {', '.join(RATES)}")
    trees = {"this": ROOT}
    if args.baseline is not None:
        trees = {"baseline": args.baseline.resolve(), "this": ROOT}
    print(
        f"command round trips: {args.rounds} rounds of pause, step, resume, knobs, inject, "
        f"abort per run ({6 * args.rounds} commands), {args.db} database, {os.cpu_count()} CPUs"
    )
    for rate in chosen:
        realtime, loaded = RATES[rate]
        runs: dict[str, list[Run]] = {name: [] for name in trees}
        print(f"{rate}:")
        for k in range(args.repeat):
            if args.paired:
                with contextlib.ExitStack() as stack:
                    urls = [
                        stack.enter_context(_server(r, realtime, args.db)) for r in trees.values()
                    ]
                    for name, run in zip(trees, _measure(urls, args.rounds, loaded), strict=True):
                        runs[name].append(run)
                        print(_line(f"{name} #{k + 1} paired", run), flush=True)
                continue
            # Alternate which tree goes first, so a load that drifts favours neither.
            order = list(trees) if k % 2 == 0 else list(reversed(trees))
            for name in order:
                with _server(trees[name], realtime, args.db) as url:
                    (run,) = _measure([url], args.rounds, loaded)
                runs[name].append(run)
                print(_line(f"{name} #{k + 1}", run), flush=True)
        if "baseline" in runs:
            print(_ratio(runs["baseline"], runs["this"]))


if __name__ == "__main__":
    main()
