"""The release matrix: the engine's decisions and the adapter against every vLLM release.

    .venv/bin/python tools/vllm_matrix.py [RELEASE ...] [--random N] [--write-docs]
    make vllm-matrix                      # every release, the table into docs

For each release (default: every one the engine can decide as, engine.releases.SUPPORTED)
it runs vLLM's own scheduler: from the release's venv where there is one (.venv-vllm,
.venv-vllm-033, .venv-vllm-034), else from the release's wheel unpacked once without its
dependencies into --cache (default ~/.cache/batchscope/vllm-releases, ~300 MB a release)
and put first on the path of the reference venv that lends it the rest
(tools/compare_scenario.host_venv). Then:
- decisions: tools/compare_scenario's differential check, both sides deciding as that
  release, on the shipped scenarios and on --random N generated traces per engine loop
  (sync, async with the batch queue of 2, speculative decoding), counted per loop;
- adapter: tools/vllm_release_check.py's check on that release's own engine loops
  (batchscope_vllm observing vLLM's scheduler: every observed step must equal vLLM's
  decision, and a failure in each observer hook must leave vLLM's decisions unchanged).

Prints one row per release; `--write-docs` writes them into the generated table in
docs/vllm_releases.md (between its `vllm-matrix` markers), keeping the rows of releases
not run this time. Exit status 1 when any release
differs anywhere, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from engine.releases import SUPPORTED, normalize_version, version_key  # noqa: E402
from tools.compare_scenario import (  # noqa: E402
    MODES,
    VLLM_VENVS,
    Comparer,
    host_venv,
    random_scenario,
)

DOCS = REPO_ROOT / "docs" / "vllm_releases.md"
BEGIN, END = "<!-- vllm-matrix:begin -->", "<!-- vllm-matrix:end -->"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
DEFAULT_CACHE = DEFAULT_CACHE / "batchscope" / "vllm-releases"


@dataclass
class Row:
    release: str
    source: str
    """Where vLLM came from: its venv, or the unpacked wheel."""
    loops: dict[str, list[int]] = field(default_factory=lambda: {m: [0, 0] for m in MODES})
    """Engine loop -> [identical, compared]."""
    first: list[str] = field(default_factory=list)
    """The first differences found (scenario: where)."""
    adapter: str = "not run"
    seconds: float = 0.0
    traces: str = ""
    """The generated traces per loop (random + stress)."""

    def exact(self) -> bool:
        same = all(done == total for done, total in self.loops.values())
        return same and self.adapter in ("ok", "not run")

    def cells(self) -> list[str]:
        loops = [f"{done} / {total}" for done, total in self.loops.values()]
        when = time.strftime("%Y-%m-%d")
        cells = [self.release, self.source, *loops, self.adapter, self.traces]
        return [*cells, f"{self.seconds:.0f} s", when]


def reference_for(release: str, cache: Path) -> tuple[str, Path | None, str]:
    """(python, unpacked wheel or None, how it was found) for vLLM `release`."""
    own = VLLM_VENVS.get(release)
    if own and (REPO_ROOT / own / "bin" / "python").exists():
        return str(REPO_ROOT / own / "bin" / "python"), None, own
    python = str(REPO_ROOT / host_venv(release) / "bin" / "python")
    if not Path(python).exists():
        raise SystemExit(f"no {host_venv(release)} to host vLLM {release}: run make vllm-venv")
    return python, unpack(f"{release}.0", python, cache), f"wheel on {host_venv(release)}"


def unpack(version: str, python: str, cache: Path) -> Path:
    """vLLM `version`'s wheel, without its dependencies, in `cache` (once)."""
    target = cache / version
    if not (target / "vllm" / "__init__.py").exists():
        tmp = cache / f".{version}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        pip += ["--no-deps", "--target", str(tmp), f"vllm=={version}"]
        if subprocess.run(pip).returncode != 0:
            raise SystemExit(f"vLLM {version}: pip could not fetch its wheel")
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)  # whole or not at all: a killed unpack is never taken as done
    return target


def _loop(config: dict[str, object]) -> str:
    if config.get("async_scheduling"):
        return "async"
    return "spec" if config.get("num_speculative_tokens") else "sync"


def check_decisions(
    row: Row, python: str, path: Path | None, n: int, seed: int, stress: int = 0
) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="matrix-"))
    comparer = Comparer(python, workdir, path)
    try:
        traces: list[dict[str, object]] = []
        for scenario in sorted((REPO_ROOT / "scenarios").glob("*.json")):
            traces.append(json.loads(scenario.read_text()))
        rng = random.Random(seed)
        for i in range(n * len(MODES)):
            mode = MODES[i % len(MODES)]
            name = f"rand_{mode}_s{seed}_{i:04d}"
            traces.append(random_scenario(rng, name, False, mode, row.release))
        for i in range(stress * len(MODES)):  # KV pressure, preemption, prefix sharing
            mode = MODES[i % len(MODES)]
            name = f"rand_stress_{mode}_s{seed}_{i:04d}"
            traces.append(random_scenario(rng, name, True, mode, row.release))
        for data in traces:
            config = data.setdefault("config", {})
            assert isinstance(config, dict)
            config["vllm_version"] = row.release
            diff, _, _ = comparer.compare(data)
            counts = row.loops[_loop(config)]
            counts[1] += 1
            if diff is None:
                counts[0] += 1
            elif len(row.first) < 3:
                row.first.append(f"{data['name']}: {diff['where']} {diff['index']} {diff['keys']}")
    finally:
        comparer.close()
        shutil.rmtree(workdir, ignore_errors=True)


def check_adapter(python: str, path: Path | None) -> str:
    """tools/vllm_release_check.py's check, on this release's own engine loops."""
    parts = [str(path)] if path else []
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([*parts, str(REPO_ROOT)]),
        "VLLM_LOGGING_LEVEL": "ERROR",
    }
    tool = str(REPO_ROOT / "tools" / "vllm_release_check.py")
    done = subprocess.run(
        [python, tool, "--inner"], env=env, capture_output=True, text=True, cwd=REPO_ROOT
    )
    lines = [x for x in done.stdout.splitlines() if x.startswith("vLLM ")]
    if done.returncode == 0 and lines and lines[-1].endswith(": ok"):
        return "ok"
    if done.returncode == 0 and lines and ": degraded (" in lines[-1]:
        return "degraded (" + lines[-1].split(": degraded (", 1)[1]
    why = lines[-1].split(": ", 2)[-1] if lines else (done.stderr.strip().splitlines() or ["?"])[-1]
    return f"FAILED ({why[:160]})"


HEAD = [
    "release",
    "vLLM from",
    "sync",
    "async",
    "spec",
    "adapter",
    "generated traces per loop",
    "time",
    "checked",
]
OLD_HEAD = 8
"""Rows of the table before its `generated traces per loop` column (random traces only,
the adapter driven by tools/vllm_drive.py's loop): kept, marked stale, until rerun."""
STALE = "stale: random only; adapter in the driver's loop, not vLLM's (rerun this row)"
INTRO = (
    "Generated by `tools/vllm_matrix.py` (`make vllm-matrix`; `make vllm-matrix "
    "RELEASES=0.27` redoes one row): per engine loop, the traces whose every step is "
    "identical to vLLM's / the traces compared (the shipped scenarios, N random and M "
    "stress traces per loop: `--random N --stress M`); the adapter: installed by class "
    "name and driven by the release's own `EngineCore.step` / `step_with_batch_queue` "
    "(sync, async, sync + spec, async + spec; a stand-in model, "
    "tools/vllm_engine_drive.py), every step it observed equal to vLLM's decision, and a "
    "fault in each observer hook harmless. time: the row's wall clock on the machine that "
    "ran it, its load included."
)


def table(rows: Sequence[Row], kept: dict[str, str]) -> str:
    """The docs table: these rows, and the rows `kept` (release -> line) of releases
    not run this time, in release order."""
    lines = {r.release: "| " + " | ".join(r.cells()) + " |" for r in rows}
    merged = {**kept, **lines}
    body = [merged[r] for r in sorted(merged, key=version_key)]
    out = [INTRO, "", "| " + " | ".join(HEAD) + " |", "| " + " | ".join("---" for _ in HEAD) + " |"]
    out += body
    differences = [f"- {r.release}: {first}" for r in rows for first in r.first]
    if differences:
        out += ["", "First differences (this run):", *differences]
    return "\n".join(out)


def documented_rows() -> dict[str, str]:
    """The rows the docs table has now, by release."""
    doc = DOCS.read_text()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{DOCS} has no {BEGIN} ... {END} markers")
    block = doc.split(BEGIN, 1)[1].split(END, 1)[0]
    rows: dict[str, str] = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == OLD_HEAD and cells[0] in SUPPORTED:
            cells.insert(6, STALE)
            rows[cells[0]] = "| " + " | ".join(cells) + " |"
        elif len(cells) == len(HEAD) and cells[0] in SUPPORTED:
            rows[cells[0]] = line.strip()
    return rows


def write_docs(text: str) -> None:
    doc = DOCS.read_text()
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOCS.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


SOURCES = (
    "v1/core/sched/scheduler.py",
    "v1/core/sched/async_scheduler.py",
    "v1/core/sched/output.py",
    "v1/core/sched/request_queue.py",
    "v1/core/kv_cache_manager.py",
    "v1/core/block_pool.py",
    "v1/request.py",
    "v1/outputs.py",
    "v1/engine/core.py",
    "config/scheduler.py",
    "config/cache.py",
)
"""The files whose changes can change a scheduling decision or what the adapter reads."""


def changed_sources(old: Path, new: Path) -> list[str]:
    """'file: -A +B lines' for each of SOURCES that differs between two vllm packages."""
    import difflib

    out: list[str] = []
    for name in SOURCES:
        a, b = old / name, new / name
        if not a.exists() or not b.exists():
            out.append(f"{name}: {'added' if b.exists() else 'removed'}")
            continue
        diff = list(difflib.unified_diff(a.read_text().splitlines(), b.read_text().splitlines()))
        minus = sum(1 for x in diff if x.startswith("-") and not x.startswith("---"))
        plus = sum(1 for x in diff if x.startswith("+") and not x.startswith("+++"))
        if minus or plus:
            out.append(f"{name}: -{minus} +{plus} lines")
    return out


def check_new(version: str, cache: Path, n: int, seed: int, stress: int = 0) -> int:
    """A release nobody modelled: vLLM `version` against the newest modelled release."""
    newest = SUPPORTED[-1]
    parts = version.lstrip("v").split(".")
    if len(parts) < 2 or not all(x.isdigit() for x in parts):
        raise SystemExit(2)
    full = ".".join(parts + ["0"] * (3 - len(parts)))
    python = str(REPO_ROOT / VLLM_VENVS[newest] / "bin" / "python")
    if not Path(python).exists():
        print(f"no {VLLM_VENVS[newest]} (make vllm-venv): it hosts the new release")
        return 2
    target = unpack(full, python, cache)
    os.environ["BATCHSCOPE_NEW_RELEASE"] = "1"  # the reference runs whatever vllm it finds
    started = time.monotonic()
    row = Row(newest, f"vLLM {full} (wheel on {VLLM_VENVS[newest]})", traces=f"{n} + {stress}")
    check_decisions(row, python, target, n, seed, stress)
    row.adapter = check_adapter(python, target)
    row.seconds = time.monotonic() - started
    own = REPO_ROOT / VLLM_VENVS[newest] / "lib" / "python3.11" / "site-packages" / "vllm"
    print(f"vLLM {full} against batchscope's newest modelled release, {newest}:")
    loops = ", ".join(f"{m} {a} / {t}" for m, (a, t) in row.loops.items())
    print(f"- decisions (identical traces / traces): {loops}")
    for first in row.first:
        print(f"    first difference: {first}")
    print(f"- adapter on its own engine loops: {row.adapter}")
    changes = changed_sources(own, target / "vllm")
    print(f"- scheduler, KV-cache and engine-core files changed since {newest}: "
          + ("none" if not changes else ""))  # fmt: skip
    for change in changes:
        print(f"    {change}")
    print(f"({row.seconds:.0f} s; docs/vllm_releases.md says how to add a release)")
    return 0 if row.exact() else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("releases", nargs="*", help=f"default: {SUPPORTED[0]} .. {SUPPORTED[-1]}")
    parser.add_argument("--random", type=int, default=15, metavar="N", help="traces per loop")
    parser.add_argument(
        "--stress",
        type=int,
        default=10,
        metavar="N",
        help="stress traces per loop (tools/compare_scenario.py --stress: budgets from 1, "
        "2 KV blocks, 30 requests; preemption, prefix sharing, priority)",
    )
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--no-adapter", action="store_true", help="decisions only")
    parser.add_argument("--write-docs", action="store_true", help="the table into the docs")
    parser.add_argument(
        "--new",
        metavar="VERSION",
        help="a release nobody modelled (e.g. 0.35): its decisions against the newest "
        "modelled release, the adapter on it, and which scheduler files changed",
    )
    args = parser.parse_args(argv)
    if args.new:
        args.cache.mkdir(parents=True, exist_ok=True)
        try:
            return check_new(args.new, args.cache, args.random, args.seed, args.stress)
        except SystemExit as exc:
            if exc.code == 2:
                parser.error(f"--new {args.new!r}: give a release such as 0.35 or 0.35.1")
            raise
    try:
        releases = [normalize_version(r) for r in args.releases] or list(SUPPORTED)
    except ValueError as exc:
        parser.error(str(exc))
    if args.random < 0 or args.stress < 0:
        parser.error("--random and --stress must be >= 0")
    args.cache.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    for release in releases:
        started = time.monotonic()
        python, path, source = reference_for(release, args.cache)
        row = Row(release, source, traces=f"{args.random} random + {args.stress} stress")
        try:
            check_decisions(row, python, path, args.random, args.seed, args.stress)
        except RuntimeError as exc:  # vLLM's reference did not start or answer
            row.source += f" (did not run: {str(exc)[:120]})"
            row.loops = {m: [0, 1] for m in MODES}
        if not args.no_adapter:
            row.adapter = check_adapter(python, path)
        row.seconds = time.monotonic() - started
        rows.append(row)
        print("| " + " | ".join(row.cells()) + " |", flush=True)
        for first in row.first:
            print(f"    {first}", flush=True)
    if args.write_docs:
        write_docs(table(rows, documented_rows()))
    return 0 if all(r.exact() for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
