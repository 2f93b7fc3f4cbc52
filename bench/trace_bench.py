"""Production traces at full size, this checkout beside a baseline checkout in the same run
(issue 33): a Mooncake-style trace (12,000 requests over an hour, prompts up to 128k
tokens, shared prefixes), then for each side, through the CLI and HTTP only:

- import: `batchscope import-trace TRACE --out SCENARIO` (wall time, peak RSS, output size
  beside the trace's size);
- a sweep point: `batchscope sweep trace:TRACE --knob max_num_seqs=256 --workers 1` (wall
  time, peak RSS of the process tree's largest process, requests finished / rejected out of
  the trace's, and complete or truncated, judged from those counts, not from a flag);
- simulate: `batchscope simulate SCENARIO --out RESULT` of 8 requests decoding 5,000 and
  50,000 tokens (peak RSS at each length: the result is written as the run goes);
- recording: `batchscope serve --workload trace:REC` with the sim flat out
  (BATCHSCOPE_REALTIME=false) on a fresh SQLite file (or, with --record-postgres, a fresh
  database on that PostgreSQL server), timed until every request of REC has
  finished (/metrics) and the recorder has no frame waiting (/healthz);
- replay on that recording: the first page of GET /api/sessions/ID/requests and seeks (a
  random step, filter or sort), p50 / p99: on the recording server with the session still
  live (an operator scrubbing it), then after the server stopped (the recording ended)
  on a fresh `serve --workload none` over the same file (someone replaying it).

    python -m bench.trace_bench [--requests 12000] [--record-requests 100000]
        [--baseline b55fd5b | --no-baseline] [--timeout 900] [--trace FILE]
        [--only import|sweep|simulate|record ...] [--sweep-max-steps 1000000]
        [--record-postgres postgresql://postgres@127.0.0.1:5432/postgres]

Each figure is printed beside the baseline's (`> N s (stopped)` where the baseline ran out
of its time limit) and the issue's target. The baseline is `git worktree add` of
--baseline into a temporary directory, run by this same interpreter with the baseline's
tree first on sys.path (its own code, this venv's packages), and removed at the end.
The trace is made here (a seeded generator, below) unless --trace names one; h33a's
tools/gen_trace.py makes the same shape and can be passed as --trace's output.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

import httpx

ROOT = Path(__file__).resolve().parent.parent
BLOCK_TOKENS = 512
TOKEN = "trace-bench-token"
PAGE_LIMIT_S = 60.0
"""How long one replay request may take before it is printed as timed out."""
TARGETS = {
    "import": "output about the trace's size",
    "sweep": "<= 60 s and <= 1 GB per point, every request finished or rejected",
    "simulate": "peak RSS not growing with the steps beyond the tokens the engine holds",
    "record": "100,000 requests in minutes",
    "first_page": "<= 200 ms",
    "ended_first_page": "<= 200 ms",
    "seek_p99": "<= 100 ms",
    "ended_seek_p99": "<= 100 ms",
}
# The engine the recording runs (and the trace's sweep point): room for a 128k prompt.
ENGINE_ENV = {
    "BATCHSCOPE_REALTIME": "false",
    "BATCHSCOPE_MAX_NUM_SEQS": "256",
    "BATCHSCOPE_MAX_NUM_BATCHED_TOKENS": "8192",
    "BATCHSCOPE_MAX_MODEL_LEN": "140000",
    "BATCHSCOPE_NUM_GPU_BLOCKS": "40000",
    "BATCHSCOPE_BLOCK_SIZE": "16",
}


# ------------------------------------------------------------------ the trace
def write_trace(path: Path, n: int, duration_s: float, max_prompt: int, seed: int) -> None:
    """A Mooncake-style JSONL trace: Poisson arrivals over `duration_s`, prompt lengths
    log-normal (median ~2k tokens) clipped to [64, max_prompt] with a tenth of requests
    long-context (16k .. max_prompt), outputs 1 .. 1024, and shared prefixes: 60% of
    requests open with one of 40 system prompts (1 .. 8 blocks), a third of those also
    continue one of 400 earlier conversations (up to 64 more shared blocks)."""
    rng = random.Random(seed)
    next_id = 0

    def fresh(k: int) -> list[int]:
        nonlocal next_id
        ids = list(range(next_id, next_id + k))
        next_id += k
        return ids

    systems = [fresh(rng.randint(1, 8)) for _ in range(40)]
    convos = [fresh(rng.randint(4, 64)) for _ in range(400)]
    t_ms = 0.0
    rate_per_ms = n / (duration_s * 1000.0)
    with path.open("w", encoding="utf-8") as out:
        for _ in range(n):
            t_ms += rng.expovariate(rate_per_ms)
            if rng.random() < 0.1:
                prompt = rng.randint(min(16_384, max_prompt), max_prompt)
            else:
                prompt = int(min(max_prompt, max(64, rng.lognormvariate(math.log(2048), 1.0))))
            blocks = math.ceil(prompt / BLOCK_TOKENS)
            ids: list[int] = []
            if rng.random() < 0.6:
                ids += rng.choice(systems)
                if rng.random() < 1 / 3:
                    ids += rng.choice(convos)
            ids = ids[:blocks]
            ids += fresh(blocks - len(ids))
            row = {
                "timestamp": int(t_ms),
                "input_length": prompt,
                "output_length": rng.randint(1, 1024),
                "hash_ids": ids,
            }
            out.write(json.dumps(row, separators=(",", ":")) + "\n")


# ------------------------------------------------------------- child processes
@dataclass
class Run:
    rc: int | None
    """None: stopped at the time limit."""
    wall_s: float
    max_rss_mb: float
    """The largest resident set of the process and its waited-for descendants."""
    tail: str = ""


def run_child(cmd: list[str], cwd: Path, env: dict[str, str], limit_s: float) -> Run:
    """`cmd` in its own process group, stopped (the whole group) after `limit_s`; its
    peak RSS from wait4 (Linux: the largest of it and its children)."""
    with tempfile.TemporaryFile() as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        deadline = t0 + limit_s
        stopped = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                stopped = True
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        tail = log.read().decode(errors="replace")[-600:]
    return Run(None if stopped else proc.returncode, wall, usage.ru_maxrss / 1024, tail)


@dataclass
class Side:
    name: str
    root: Path
    figures: dict[str, str] = field(default_factory=dict)
    raw: dict[str, float] = field(default_factory=dict)

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(self.root)
        env.update(extra or {})
        return env

    def cli(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "app.cli", *args]


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.1f} MB"


def bench_import(side: Side, trace: Path, work: Path, limit: float) -> None:
    out = work / f"{side.name}-scenario.json"
    run = run_child(side.cli("import-trace", str(trace), "--out", str(out)), side.root,
                    side.env(), limit)  # fmt: skip
    if run.rc is None:
        side.figures["import"] = f"> {limit:.0f} s (stopped)"
        return
    if run.rc != 0:
        side.figures["import"] = f"failed (exit {run.rc}): {run.tail.strip()[-200:]}"
        return
    size = out.stat().st_size
    side.raw.update(import_s=run.wall_s, import_bytes=size)
    side.figures["import"] = (
        f"{run.wall_s:.1f} s, {_mb(size)} ({size / trace.stat().st_size:.1f}× the trace), "
        f"peak RSS {run.max_rss_mb:.0f} MB"
    )
    out.unlink()


def bench_sweep(side: Side, trace: Path, n: int, cost_model: str, work: Path, limit: float,
                max_steps: int) -> None:  # fmt: skip
    out = work / f"{side.name}-point.json"
    cmd = side.cli(
        "sweep", f"trace:{trace}", "--knob", "max_num_seqs=256",
        "--set", "max_num_batched_tokens=8192", "--set", "num_gpu_blocks=40000",
        "--set", "max_model_len=140000", "--cost-model", cost_model, "--workers", "1",
        "--out", str(out),
    )  # fmt: skip
    if "--max-steps" in (side.root / "app" / "cli" / "sweep.py").read_text():
        # (A baseline from before the option has the engine's default cap: its point
        # then says TRUNCATED when an overloaded hour needs more steps.)
        cmd += ["--max-steps", str(max_steps)]
    run = run_child(cmd, side.root, side.env(), limit)
    if run.rc is None:
        side.figures["sweep"] = (
            f"> {limit:.0f} s (stopped), peak RSS so far {run.max_rss_mb:.0f} MB"
        )
        return
    if not out.exists():
        side.figures["sweep"] = f"failed (exit {run.rc}): {run.tail.strip()[-200:]}"
        return
    data = json.loads(out.read_text())
    point = data["points"][0]
    metrics = point.get("metrics") or {}
    finished = int(metrics.get("requests_finished", 0))
    rejected = metrics.get("requests_rejected", metrics.get("rejected"))
    settled = finished + int(rejected or 0)
    verdict = "complete" if settled == n and not point.get("error") else "TRUNCATED"
    if point.get("error"):
        verdict += f" ({point['error']})"
    rej = "rejected not reported" if rejected is None else f"{int(rejected)} rejected"
    side.raw.update(sweep_s=run.wall_s, sweep_rss_mb=run.max_rss_mb)
    side.figures["sweep"] = (
        f"{run.wall_s:.1f} s, peak RSS {run.max_rss_mb:.0f} MB, {finished} finished, {rej} "
        f"of {n}: {verdict}; sim time {metrics.get('duration_s', 0):.0f} s"
    )
    out.unlink()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def recording_database(side: Side, work: Path, postgres: str | None) -> Iterator[str]:
    """The URL of a fresh database to record into: a SQLite file in `work`, or a new
    database on the PostgreSQL server of `postgres` (an admin URL), dropped afterwards."""
    if postgres is None:
        yield f"sqlite:///{work / (side.name.split()[0] + '-rec.db')}"
        return
    import psycopg

    name = f"trace_bench_{side.name.split()[0]}_{os.getpid()}"
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield postgres.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(postgres, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def bench_record_replay(
    side: Side,
    trace: Path,
    n: int,
    work: Path,
    limit: float,
    seeks: int,
    postgres: str | None = None,
) -> None:
    """Record REC through `serve --workload trace:REC` flat out, then page and seek it
    (on a SQLite file, or a fresh PostgreSQL database on the server of `postgres`)."""
    with recording_database(side, work, postgres) as url:
        _record_replay(side, trace, n, url, limit, seeks)


def _record_replay(side: Side, trace: Path, n: int, url: str, limit: float, seeks: int) -> None:
    upgrade = run_child(side.cli("db", "upgrade", "--database-url", url), side.root,
                        side.env(), 120)  # fmt: skip
    if upgrade.rc != 0:
        side.figures["record"] = f"db upgrade failed: {upgrade.tail.strip()[-200:]}"
        return
    port = _free_port()
    cmd = side.cli("serve", "--port", str(port), "--runner", "sim", "--workload",
                   f"trace:{trace}", "--token", TOKEN, "--database-url", url)  # fmt: skip
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in the finally below)
    procs: list[subprocess.Popen[bytes]] = []

    def serve(workload: str) -> subprocess.Popen[bytes]:
        args = [*cmd]
        args[args.index("--workload") + 1] = workload
        proc = subprocess.Popen(args, cwd=side.root, env=side.env(ENGINE_ENV), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        procs.append(proc)
        return proc

    t0 = time.perf_counter()
    proc = serve(f"trace:{trace}")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120,
                          headers={"Authorization": f"Bearer {TOKEN}"}) as c:  # fmt: skip
            sid, record_s, held = _wait_recorded(c, proc, n, t0, limit)
            if sid is None:
                log.seek(0)
                tail = log.read().decode(errors="replace").strip()[-200:]
                side.figures["record"] = f"failed: {tail}"
                return
            label = ""
            if record_s is None:
                side.figures["record"] = (
                    f"> {limit:.0f} s (stopped; {held} of {n} requests finished by then)"
                )
                # Stop the engine; the replay figures are of what it recorded by then.
                _stop(proc)
                _wait_healthy(c, serve("none"))
                label = f" (partial recording: {held} of {n} requests finished)"
            else:
                side.raw["record_s"] = record_s
                side.figures["record"] = f"{record_s:.1f} s for {n} requests"
            _replay(side, c, sid, seeks, label)
            if record_s is not None:
                # Stopping the server ends the session (its writer stores what a replay
                # starts from); a fresh server then replays the recording.
                _stop(proc)
                _wait_healthy(c, serve("none"))
                _replay(side, c, sid, seeks, prefix="ended_")
    finally:
        for p in procs:
            _stop(p)
        log.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _wait_healthy(c: httpx.Client, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            c.get("/healthz", timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.3)


def _wait_recorded(
    c: httpx.Client, proc: subprocess.Popen[bytes], n: int, t0: float, limit: float
) -> tuple[str | None, float | None, int]:
    """(session id, seconds to record, requests finished) once the engine has finished
    (or rejected) all `n` requests (/metrics: vllm:request_success_total over every
    reason) and the recorder has no frame waiting (/healthz); seconds None at the time
    limit; id None if the server died first."""
    sid: str | None = None
    finished = 0
    while True:
        now = time.perf_counter()
        if proc.poll() is not None:
            return None, None, finished
        if now - t0 > limit:
            return sid, None, finished
        try:
            if sid is None:
                rows = c.get("/api/sessions").json()
                local = [r for r in rows if r.get("source") == "local"]
                sid = local[0]["id"] if local else None
            finished = _finished(c.get("/metrics").text)
            if sid is not None and finished >= n:
                lag = c.get("/healthz").json()["checks"]["recorder"]["info"]["lag"]
                if lag == 0:
                    return sid, time.perf_counter() - t0, finished
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.5)


def _finished(metrics: str) -> int:
    """Requests finished for any reason, from Prometheus text."""
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("vllm:request_success_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


SEEK_QUERIES: list[dict[str, str]] = [
    {}, {"sort": "-e2e"}, {"sort": "ttft"}, {"status": "finished"},
    {"status": "running,waiting"}, {"sort": "-arrival"},
]  # fmt: skip


def _replay(
    side: Side, c: httpx.Client, sid: str, seeks: int, label: str = "", prefix: str = ""
) -> None:
    """The first page and `seeks` seeks, as figures `{prefix}first_page` and
    `{prefix}seek_p99` (and raw `{prefix}first_page_ms`, `{prefix}seek_p50_ms`, ...)."""
    rng = random.Random(1)
    steps = c.get(f"/api/sessions/{sid}").json()["steps"]
    t0 = time.perf_counter()
    try:
        first = c.get(f"/api/sessions/{sid}/requests", params={"limit": 50}, timeout=PAGE_LIMIT_S)
    except httpx.TimeoutException:
        side.figures[prefix + "first_page"] = f"> {PAGE_LIMIT_S:.0f} s (timed out){label}"
        return
    first_ms = (time.perf_counter() - t0) * 1000
    if first.status_code != 200:
        side.figures[prefix + "first_page"] = f"HTTP {first.status_code}: {first.text[:120]}"
        return
    total = first.headers.get("x-total-count", "?")
    side.raw[prefix + "first_page_ms"] = first_ms
    side.figures[prefix + "first_page"] = f"{first_ms:.1f} ms (of {total} rows){label}"
    times: list[float] = []
    for _ in range(seeks):
        params: dict[str, str | int] = {**rng.choice(SEEK_QUERIES), "limit": 50,
                                        "step": rng.randrange(steps)}  # fmt: skip
        t0 = time.perf_counter()
        try:
            got = c.get(f"/api/sessions/{sid}/requests", params=params, timeout=PAGE_LIMIT_S)
        except httpx.TimeoutException:
            side.figures[prefix + "seek_p99"] = (
                f"a seek > {PAGE_LIMIT_S:.0f} s (timed out) after {len(times)}{label}"
            )
            return
        times.append((time.perf_counter() - t0) * 1000)
        if got.status_code != 200:
            side.figures[prefix + "seek_p99"] = f"HTTP {got.status_code}: {got.text[:120]}"
            return
    times.sort()
    p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
    side.raw[prefix + "seek_p50_ms"], side.raw[prefix + "seek_p99_ms"] = median(times), p99
    side.figures[prefix + "seek_p99"] = (
        f"p50 {median(times):.1f} ms, p99 {p99:.1f} ms ({seeks} seeks){label}"
    )


# ---------------------------------------------------------------------- main
def baseline_checkout(ref: str, into: Path) -> Path:
    subprocess.run(["git", "worktree", "add", "--detach", str(into), ref], cwd=ROOT,
                   check=True, capture_output=True)  # fmt: skip
    return into


def remove_checkout(path: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT,
                   capture_output=True)  # fmt: skip
    shutil.rmtree(path, ignore_errors=True)


SIMULATE_STEPS = (5_000, 50_000)


def bench_simulate(side: Side, work: Path, limit: float) -> None:
    """`batchscope simulate SCENARIO --out RESULT` of 8 requests decoding N tokens (N steps
    and a few more), at each N of SIMULATE_STEPS: peak RSS beside the result's size, so
    what grows with the steps shows (the result itself, or only the tokens the engine
    holds: 8 requests × N output tokens)."""
    parts = []
    for steps in SIMULATE_STEPS:
        scenario = work / f"{side.name}-long{steps}.json"
        scenario.write_text(json.dumps({
            "name": f"long{steps}",
            "config": {"max_num_batched_tokens": 2048, "max_num_seqs": 8, "block_size": 16,
                       "num_gpu_blocks": 40000, "max_model_len": steps + 200,
                       "max_steps": 10 * steps},
            "requests": [{"id": f"r{i}", "arrival_step": 0, "prompt_len": 100,
                          "max_tokens": steps} for i in range(8)],
        }))  # fmt: skip
        out = work / f"{side.name}-result{steps}.json"
        run = run_child(side.cli("simulate", str(scenario), "--out", str(out)), side.root,
                        side.env(), limit)  # fmt: skip
        if run.rc is None:
            parts.append(f"{steps} steps: > {limit:.0f} s (stopped)")
            break
        if run.rc != 0 or not out.exists():
            parts.append(f"{steps} steps: failed (exit {run.rc}): {run.tail.strip()[-200:]}")
            break
        parts.append(
            f"{steps} steps: {run.wall_s:.1f} s, peak RSS {run.max_rss_mb:.0f} MB, "
            f"result {_mb(out.stat().st_size)}"
        )
        side.raw[f"simulate_{steps}_rss_mb"] = run.max_rss_mb
        out.unlink()
    side.figures["simulate"] = "; ".join(parts)


def print_table(sides: list[Side], labels: dict[str, str]) -> None:
    width = max(len(s.name) for s in [*sides, Side("target", ROOT)])
    for key, title in labels.items():
        print(f"{title}")
        for side in sides:
            print(f"  {side.name:<{width}}  {side.figures.get(key, 'not measured')}")
        print(f"  {'target':<{width}}  {TARGETS[key]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=12_000, help="requests in the trace")
    ap.add_argument("--duration-s", type=float, default=3600.0, help="the trace's span")
    ap.add_argument("--max-prompt", type=int, default=131_072)
    ap.add_argument("--record-requests", type=int, default=100_000,
                    help="requests in the recorded trace (same shape, span scaled)")  # fmt: skip
    ap.add_argument("--record-max-prompt", type=int, default=4096,
                    help="longest prompt of the recorded trace (default 4096: the recording "
                         "measures the recorder, not the sim on 128k prompts)")  # fmt: skip
    ap.add_argument("--record-span-s", type=float,
                    help="the recorded trace's span (default: 500 arrivals a second)")  # fmt: skip
    ap.add_argument("--record-postgres", metavar="ADMIN_URL",
                    help="record into a fresh database on this PostgreSQL server (e.g. "
                         "postgresql://postgres@127.0.0.1:5432/postgres; created and "
                         "dropped here) instead of a SQLite file")  # fmt: skip
    ap.add_argument("--seeks", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trace", type=Path, help="use this trace instead of generating one")
    ap.add_argument("--cost-model", default="h100:llama-3-8b",
                    help="a preset both sides know (default h100:llama-3-8b)")  # fmt: skip
    ap.add_argument("--baseline", default="b55fd5b", help="git ref of today's code")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--sweep-max-steps", type=int, default=1_000_000,
                    help="the sweep point's step cap (an overloaded hour of 12k requests "
                    "takes ~108k steps, past the engine's default 100k)")  # fmt: skip
    ap.add_argument("--timeout", type=float, default=900.0,
                    help="seconds each measured command may take, per side")  # fmt: skip
    ap.add_argument("--only", choices=("import", "sweep", "simulate", "record"),
                    action="append",
                    help="measure only these (repeatable; default all)")  # fmt: skip
    args = ap.parse_args(argv)
    if (
        args.requests < 1
        or args.record_requests < 1
        or min(args.max_prompt, args.record_max_prompt) < 64
    ):
        print("trace_bench: --requests and --record-requests >= 1, prompts >= 64 tokens",
              file=sys.stderr)  # fmt: skip
        return 2
    only = set(args.only or ("import", "sweep", "simulate", "record"))
    with tempfile.TemporaryDirectory(prefix="trace-bench-") as tmp:
        work = Path(tmp)
        trace = args.trace or work / "trace.jsonl"
        if args.trace is None:
            write_trace(trace, args.requests, args.duration_s, args.max_prompt, args.seed)
        n = sum(1 for line in trace.open() if line.strip())
        rec = work / "record.jsonl"
        # The live engine takes arrivals on the wall clock: the recorded trace comes fast
        # (500 a second by default), so the engine runs flat out at its max_num_seqs and
        # the time measured is the engine's and the recorder's, not the trace's span.
        span = args.record_span_s or args.record_requests / 500
        write_trace(rec, args.record_requests, span, args.record_max_prompt, args.seed + 1)
        print(f"trace: {n} requests, {_mb(trace.stat().st_size)}; recording trace: "
              f"{args.record_requests} requests over {span:.0f} s, prompts <= "
              f"{args.record_max_prompt}; cost model "
              f"{args.cost_model}; limit {args.timeout:.0f} s per command")  # fmt: skip
        sides = [Side("this", ROOT)]
        base_dir = work / "baseline"
        if not args.no_baseline:
            sides.append(
                Side(f"baseline {args.baseline}", baseline_checkout(args.baseline, base_dir))
            )
        try:
            for side in sides:
                print(f"-- {side.name}", flush=True)
                if "import" in only:
                    bench_import(side, trace, work, args.timeout)
                if "sweep" in only:
                    bench_sweep(side, trace, n, args.cost_model, work, args.timeout,
                                args.sweep_max_steps)  # fmt: skip
                if "simulate" in only:
                    bench_simulate(side, work, args.timeout)
                if "record" in only:
                    try:
                        bench_record_replay(side, rec, args.record_requests, work,
                                            args.timeout, args.seeks,
                                            args.record_postgres)  # fmt: skip
                    except (httpx.HTTPError, OSError, ValueError, KeyError) as exc:
                        side.figures.setdefault("record", f"error: {exc!r}"[:200])
                        side.figures.setdefault("first_page", f"not measured ({exc!r})"[:200])
                for key, value in side.figures.items():
                    print(f"  {key}: {value}", flush=True)
        finally:
            if not args.no_baseline:
                remove_checkout(base_dir)
        print()
        print_table(sides, {
            "import": f"import-trace ({n} requests, trace {_mb(trace.stat().st_size)})",
            "sweep": "sweep point (the whole trace, max_num_seqs=256)",
            "simulate": "simulate --out (8 requests decoding N tokens: N steps)",
            "record": f"recording ({args.record_requests} requests, sim flat out, "
                      f"{'PostgreSQL' if args.record_postgres else 'SQLite'})",
            "first_page": "replay, live session on the recording server: first page",
            "seek_p99": "replay, live session on the recording server: seek",
            "ended_first_page": "replay, ended recording on a fresh server: first page",
            "ended_seek_p99": "replay, ended recording on a fresh server: seek",
        })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
