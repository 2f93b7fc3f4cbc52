"""Diff batchscope's scheduler against the real vLLM scheduler, step by step.

    .venv/bin/python tools/compare_scenario.py scenarios/seed.json [more.json ...]
    .venv/bin/python tools/compare_scenario.py --random 300 --seed 1 [--shrink]
    .venv/bin/python tools/compare_scenario.py --vllm-version 0.33 scenarios/*.json

Ours runs in this process (the project venv, .venv); vLLM runs in
tools/vllm_reference.py under its own venv (--vllm-python; by default the venv of
--vllm-version: .venv-vllm for 0.20 from `make vllm-venv`, .venv-vllm-033 for 0.33; see
requirements/vllm-ref*.txt), kept alive as one `--serve` process; results travel as JSON
files. The first differing step is printed with both records; exit status 1 on any
mismatch.

`--vllm-version V` (default 0.20) is the release both sides decide as: it is written into
every scenario's config (`vllm_version`, overriding the file's), so our engine follows that
release's semantics (engine.releases) and the reference must be that release.

Compared: every per-step key except `waiting_reasons` (ours only), in order (`scheduled` is
compared as an ordered list, `prefix_cache_hit_tokens` as a mapping), then the per-request
records and the totals. `timing` is not compared.

`--random N` generates N small scenarios (see `random_scenario`); every mismatching one is kept
in --mismatch-dir (default /tmp/mismatch) with both results and the diff; `--shrink` also writes
a greedily minimised scenario (<name>.min.json) that keeps the same mismatch signature.
`--new-knobs` also draws the knobs of later releases (max_num_active_seqs, watermark,
prefill_schedule_interval, long_prefill_token_threshold_adaptive, cache_aware_admission_window
and _threshold) where the release has them.
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
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
PROJECT_PYTHON = REPO_ROOT / ".venv" / "bin" / "python"
VLLM_VENVS = {"0.20": ".venv-vllm", "0.33": ".venv-vllm-033", "0.34": ".venv-vllm-034"}
"""The reference venv of each supported release (tools/setup_vllm_venv.sh builds them)."""
DEFAULT_VLLM_VERSION = "0.20"

REFERENCE = REPO_ROOT / "tools" / "vllm_reference.py"

if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

try:
    from engine.releases import SUPPORTED, knob_available, release_features, version_key
    from engine.scenario import parse_scenario, prompt_tokens
    from engine.simulate import run_scenario
except ImportError:  # not the project venv: re-run under it
    if PROJECT_PYTHON.exists() and Path(sys.executable) != PROJECT_PYTHON:
        os.execv(str(PROJECT_PYTHON), [str(PROJECT_PYTHON), *sys.argv])
    raise


def host_venv(release: str) -> str:
    """The reference venv that lends an unpacked release the scheduler's imports: 0.20's
    for 0.20 .. 0.29, 0.33's from 0.30 (whose structured outputs import fastapi)."""
    return VLLM_VENVS["0.20"] if version_key(release) <= (0, 29) else VLLM_VENVS["0.33"]


STEP_KEYS = (
    "step",
    "arrived",
    "scheduled",
    "new_req_ids",
    "resumed_req_ids",
    "preempted_req_ids",
    "prefix_cache_hit_tokens",
    "num_running",
    "num_waiting",
    "kv_blocks_used",
    "sampled_req_ids",
    "finished_req_ids",
    "num_running_end",
    "num_waiting_end",
    "kv_blocks_used_end",
    "updated_step",
    "scheduled_spec_tokens",
    "accepted_tokens",
    "appended_tokens",
)
TOTAL_KEYS = (
    "num_steps",
    "total_scheduled_tokens",
    "total_preemptions",
    "completed",
    "total_draft_tokens",
    "total_accepted_tokens",
)
MODES = ("sync", "async", "spec")


# --------------------------------------------------------------------------- running
class VllmReference:
    """One long-lived `vllm_reference.py --serve` process."""

    def __init__(self, python: str, vllm_path: Path | None = None) -> None:
        """`vllm_path`: a release's unpacked wheel, put first on the path of `python`,
        whose venv lends it the rest (tools/vllm_matrix.py)."""
        env = None
        if vllm_path is not None:
            env = {**os.environ, "PYTHONPATH": f"{vllm_path}{os.pathsep}{REPO_ROOT}"}
        self.proc = subprocess.Popen(
            [python, str(REFERENCE), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=str(REPO_ROOT),
            env=env,
        )
        self._expect("ready")

    def _expect(self, what: str | None = None) -> str:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("@@vllmref "):
                reply = line[len("@@vllmref ") :].strip()
                if what is not None and reply != what:
                    raise RuntimeError(f"vllm reference: {reply}")
                return reply
        raise RuntimeError(f"vllm reference exited (rc={self.proc.wait()})")

    def run(self, scenario_path: Path, out_path: Path) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{scenario_path}\t{out_path}\n")
        self.proc.stdin.flush()
        reply = self._expect()
        if reply != "ok":
            raise RuntimeError(f"vllm reference on {scenario_path}: {reply}")
        result: dict[str, Any] = json.loads(out_path.read_text())
        return result

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:  # every answer is in: a slow exit (a loaded
            self.proc.kill()  # machine) is not a failure of the check
            self.proc.wait()


def run_ours(data: dict[str, Any]) -> dict[str, Any]:
    return run_scenario(parse_scenario(data))


# --------------------------------------------------------------------------- diffing
def _norm_step(rec: dict[str, Any] | None) -> dict[str, Any] | None:
    if rec is None:
        return None
    out = {k: rec.get(k) for k in STEP_KEYS}
    out["scheduled"] = list((rec.get("scheduled") or {}).items())
    return out


def first_difference(ours: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any] | None:
    """None if equal; else where and what differs first (steps, then requests, then totals)."""
    so, sr = ours["steps"], ref["steps"]
    for i in range(max(len(so), len(sr))):
        a = _norm_step(so[i] if i < len(so) else None)
        b = _norm_step(sr[i] if i < len(sr) else None)
        if a != b:
            keys = (
                ["<missing step>"]
                if a is None or b is None
                else [k for k in STEP_KEYS if a[k] != b[k]]
            )
            return {
                "where": "step",
                "index": i,
                "keys": keys,
                "ours": so[i] if i < len(so) else None,
                "vllm": sr[i] if i < len(sr) else None,
            }
    for rid in ours["requests"]:
        a, b = ours["requests"][rid], ref["requests"].get(rid)
        if a != b:
            keys = sorted(k for k in set(a) | set(b or {}) if a.get(k) != (b or {}).get(k))
            return {"where": "request", "index": rid, "keys": keys, "ours": a, "vllm": b}
    failed = [
        {k: (run.get("failure") or {}).get(k) for k in ("step", "assertion")} for run in (ours, ref)
    ]
    if failed[0] != failed[1]:
        # A run that stops where vLLM's scheduler fails an assertion: same step, same check.
        return {
            "where": "total",
            "index": "failure",
            "keys": ["failure"],
            "ours": failed[0],
            "vllm": failed[1],
        }
    for key in TOTAL_KEYS:
        if ours.get(key) != ref.get(key):
            return {
                "where": "total",
                "index": key,
                "keys": [key],
                "ours": ours.get(key),
                "vllm": ref.get(key),
            }
    return None


def signature(diff: dict[str, Any]) -> str:
    return f"{diff['where']}:{','.join(diff['keys'])}"


def format_difference(diff: dict[str, Any], ours: dict[str, Any]) -> str:
    lines = [f"MISMATCH at {diff['where']} {diff['index']!r}: differing {', '.join(diff['keys'])}"]
    if diff["where"] == "step" and isinstance(diff["index"], int) and diff["index"] > 0:
        prev = ours["steps"][diff["index"] - 1]
        lines.append("  previous step (equal): " + json.dumps(_strip(prev)))
    lines.append("  ours: " + json.dumps(_strip(diff["ours"])))
    lines.append("  vllm: " + json.dumps(_strip(diff["vllm"])))
    return "\n".join(lines)


def _strip(rec: Any) -> Any:
    if isinstance(rec, dict):
        return {k: v for k, v in rec.items() if k != "waiting_reasons"}
    return rec


# --------------------------------------------------------------------------- random
def _sim_outputs(prompt: list[int], n: int) -> list[int]:
    """The tokens the scenario rule will sample after `prompt` (EOS never stops it)."""
    seq = list(prompt)
    for _ in range(n):
        seq.append(1 + (31 * seq[-1] + 17 * len(seq)) % 31999)
    return seq[len(prompt) :]


def random_scenario(
    rng: random.Random,
    name: str,
    stress: bool = False,
    mode: str = "sync",
    version: str = DEFAULT_VLLM_VERSION,
    new_knobs: bool = False,
) -> dict[str, Any]:
    """A small scenario whose every request could fit the pool on its own, for the engine
    loop `mode`: sync, async (async_scheduling) or spec (1..6 speculative tokens).

    Default ranges: budget 8..64, max_num_seqs 1..8, block_size 4/8/16, 8..40 KV blocks,
    threshold 0 or 1..16, 2..12 requests arriving over steps 0..10, prompts 1..60,
    max_tokens 1..20, max_model_len 128 (sometimes 16..64 to hit the length cap); chunked
    prefill off forces budget >= max_model_len. Prompts share prefixes, repeat earlier
    prompts exactly, or extend an earlier prompt with the outputs it will generate.
    `stress` widens everything (budget from 1, 2 KV blocks, 30 requests, 30 arrival steps).

    `version` is written into the config; the draws are the same for every release (a seed
    gives the same trace under 0.20 and 0.33), then a config the release refuses is
    adjusted: a threshold above max_model_len is lowered to it, and one that would cut a
    padded speculative decode (0 < threshold < 1 + K) is raised to 1 + K. `new_knobs`
    draws the later releases' knobs last (after the requests), where the release has them.
    """
    max_model_len = 128 if rng.random() < 0.7 else rng.randint(8 if stress else 16, 64)
    chunked = rng.random() < 0.7
    if chunked:
        budget = rng.randint(1 if stress else 8, 64)
    else:
        budget = rng.randint(max_model_len, max_model_len + 32)
    max_num_seqs = rng.randint(1, min(8, budget))
    block_size = rng.choice([1, 2, 4, 8, 16] if stress else [4, 8, 16])
    num_gpu_blocks = rng.randint(2 if stress else 8, 40)
    threshold = 0 if rng.random() < 0.5 else rng.randint(1, 16)
    prefix_caching = rng.random() < 0.5
    policy = rng.choice(["fcfs", "priority"])
    reserve = rng.random() < 0.5
    config = {
        "max_num_batched_tokens": budget,
        "max_num_seqs": max_num_seqs,
        "max_model_len": max_model_len,
        "block_size": block_size,
        "num_gpu_blocks": num_gpu_blocks,
        "long_prefill_token_threshold": threshold,
        "enable_chunked_prefill": chunked,
        "enable_prefix_caching": prefix_caching,
        "policy": policy,
        "scheduler_reserve_full_isl": reserve,
        "max_steps": 3000,
    }
    if mode == "async":
        config["async_scheduling"] = True
    elif mode == "spec":
        config["num_speculative_tokens"] = rng.randint(1, 6)
    max_prompt = min(60, max_model_len - 1)
    bases = [[rng.randint(100, 9000) for _ in range(60)] for _ in range(rng.randint(1, 2))]
    prompts: list[list[int]] = []
    requests = []
    for i in range(rng.randint(2, 30 if stress else 12)):
        max_tokens = rng.randint(1, 20)
        kind = rng.random()
        if prompts and kind < 0.15:  # an earlier prompt again: full prefix hit
            prompt = list(rng.choice(prompts))
        elif prompts and kind < 0.25:  # an earlier prompt + the outputs it will produce
            prev = rng.choice(prompts)
            prompt = (prev + _sim_outputs(prev, rng.randint(1, 20)))[:max_prompt]
        else:
            prompt_len = rng.randint(1, max_prompt)
            if rng.random() < 0.25:  # block-aligned lengths hit the last-block edge cases
                prompt_len = max(block_size, prompt_len // block_size * block_size)
                prompt_len = min(prompt_len, max_prompt)
            if rng.random() < 0.5:
                shared = rng.randint(0, prompt_len)
                prompt = rng.choice(bases)[:shared] + [
                    rng.randint(100, 9000) for _ in range(prompt_len - shared)
                ]
            else:
                prompt = prompt_tokens(i, prompt_len)
        if -(-(len(prompt) + max_tokens - 1) // block_size) > num_gpu_blocks - 1:
            continue  # could never fit the pool: skip
        prompts.append(prompt)
        req: dict[str, Any] = {
            "id": f"r{i}",
            "arrival_step": rng.randint(0, 30 if stress else 10),
            "max_tokens": max_tokens,
        }
        if prompt == prompt_tokens(i, len(prompt)):
            req["prompt_len"] = len(prompt)
        else:
            req["prompt_token_ids"] = prompt
        if policy == "priority":
            req["priority"] = rng.randint(0, 3)
        requests.append(req)
    if not requests:
        requests.append({"id": "r0", "arrival_step": 0, "prompt_len": 1, "max_tokens": 1})
    _fit_release(rng, config, version, new_knobs)
    return {"name": name, "description": "random", "config": config, "requests": requests}


def _fit_release(rng: random.Random, config: dict[str, Any], version: str, new_knobs: bool) -> None:
    config["vllm_version"] = version
    features = release_features(version)
    threshold = config["long_prefill_token_threshold"]
    if features.threshold_within_max_model_len and threshold > config["max_model_len"]:
        config["long_prefill_token_threshold"] = threshold = config["max_model_len"]
    k = config.get("num_speculative_tokens", 0)
    if features.spec_pads_new_decodes and k and 0 < threshold < 1 + k:
        config["long_prefill_token_threshold"] = 1 + k if 1 + k <= config["max_model_len"] else 0
    if not new_knobs:
        return
    later: dict[str, Callable[[], Any]] = {
        "max_num_active_seqs": lambda: rng.choice([0, rng.randint(1, config["max_num_seqs"])]),
        "watermark": lambda: rng.choice([0.0, 0.05, 0.1, 0.25]),
        "prefill_schedule_interval": lambda: rng.choice([1, 2, 3, 5]),
        "long_prefill_token_threshold_adaptive": lambda: rng.random() < 0.5,
        "cache_aware_admission_window": lambda: rng.choice([0, rng.randint(2, 8)]),
        "cache_aware_admission_threshold": lambda: rng.choice([0.0, 0.25, 0.5]),
    }
    for knob, draw in later.items():
        if knob_available(knob, version):
            config[knob] = draw()


# --------------------------------------------------------------------------- shrinking
def _materialise(data: dict[str, Any]) -> dict[str, Any]:
    """Explicit prompt_token_ids everywhere, so dropping a request keeps the others' prompts."""
    data = json.loads(json.dumps(data))
    for i, r in enumerate(data["requests"]):
        if "prompt_len" in r:
            r["prompt_token_ids"] = prompt_tokens(i, r.pop("prompt_len"))
    return data


def _tidy(data: dict[str, Any]) -> dict[str, Any]:
    """Back to prompt_len where the explicit prompt is exactly the generated one."""
    data = json.loads(json.dumps(data))
    for i, r in enumerate(data["requests"]):
        ids = r.get("prompt_token_ids")
        if ids is not None and ids == prompt_tokens(i, len(ids)):
            del r["prompt_token_ids"]
            r["prompt_len"] = len(ids)
    return data


def _candidates(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    reqs = data["requests"]
    cfg = data["config"]
    for i in range(len(reqs)):
        if len(reqs) > 1:
            yield {**data, "requests": reqs[:i] + reqs[i + 1 :]}
    for i, r in enumerate(reqs):

        def with_req(i: int = i, **changes: Any) -> dict[str, Any]:
            new = [dict(x) for x in reqs]
            new[i].update(changes)
            return {**data, "requests": new}

        if r.get("arrival_step", 0) > 0:
            yield with_req(arrival_step=0)
            yield with_req(arrival_step=r["arrival_step"] - 1)
        if r["max_tokens"] > 1:
            yield with_req(max_tokens=1)
            yield with_req(max_tokens=r["max_tokens"] // 2)
            yield with_req(max_tokens=r["max_tokens"] - 1)
        ids = r["prompt_token_ids"]
        if len(ids) > 1:
            yield with_req(prompt_token_ids=ids[: len(ids) // 2])
            yield with_req(prompt_token_ids=ids[:-1])
        if r.get("priority", 0):
            yield with_req(priority=0)

    def with_cfg(**changes: Any) -> dict[str, Any]:
        return {**data, "config": {**cfg, **changes}}

    if cfg.get("policy") == "priority":
        yield with_cfg(policy="fcfs")
    if cfg.get("long_prefill_token_threshold"):
        yield with_cfg(long_prefill_token_threshold=0)
    if cfg.get("enable_prefix_caching"):
        yield with_cfg(enable_prefix_caching=False)
    if cfg.get("num_gpu_blocks", 1024) < 1000:
        yield with_cfg(num_gpu_blocks=1000)
    if cfg.get("num_gpu_blocks", 1024) > 2:
        yield with_cfg(num_gpu_blocks=cfg["num_gpu_blocks"] - 1)
    if cfg.get("max_num_seqs", 128) > 1:
        yield with_cfg(max_num_seqs=cfg["max_num_seqs"] - 1)


def shrink(
    data: dict[str, Any],
    sig: str,
    check: Callable[[dict[str, Any]], str | None],
    budget: int = 2000,
) -> dict[str, Any]:
    """Greedy minimisation keeping the mismatch signature. check(data) -> signature | None."""
    best = _materialise(data)
    tries = 0
    improved = True
    while improved and tries < budget:
        improved = False
        for cand in _candidates(best):
            tries += 1
            try:
                parse_scenario(cand)
            except ValueError:
                continue
            if check(cand) == sig:
                best = cand
                improved = True
                break
    return _tidy(best)


# --------------------------------------------------------------------------- main
class Comparer:
    def __init__(self, vllm_python: str, workdir: Path, vllm_path: Path | None = None) -> None:
        self.ref = VllmReference(vllm_python, vllm_path)
        self.workdir = workdir
        self.n = 0

    def compare(
        self, data: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, dict[str, Any], dict[str, Any]]:
        self.n += 1
        path = self.workdir / f"s{self.n}.json"
        path.write_text(json.dumps(data))
        ours = run_ours(data)
        ref = self.ref.run(path, self.workdir / f"s{self.n}.vllm.json")
        return first_difference(ours, ref), ours, ref

    def close(self) -> None:
        self.ref.close()

    def check(self, data: dict[str, Any]) -> str | None:
        diff, _, _ = self.compare(data)
        return None if diff is None else signature(diff)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="*", type=Path)
    parser.add_argument("--random", type=int, metavar="N", help="compare N random scenarios")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mismatch-dir", type=Path, default=Path("/tmp/mismatch"))
    parser.add_argument("--shrink", action="store_true", help="minimise each random mismatch")
    parser.add_argument(
        "--stress", action="store_true", help="wider random ranges (see random_scenario)"
    )
    parser.add_argument(
        "--vllm-version",
        default=DEFAULT_VLLM_VERSION,
        choices=SUPPORTED,
        help="the release both sides decide as (written into every scenario's config); "
        "one without a venv of its own needs --vllm-path",
    )
    parser.add_argument(
        "--vllm-path",
        type=Path,
        help="the release's unpacked wheel, put first on the reference's path "
        "(tools/vllm_matrix.py makes them)",
    )
    parser.add_argument(
        "--vllm-python",
        default=os.environ.get("VLLM_REF_PYTHON"),
        help="the reference venv's python (default: the venv of --vllm-version)",
    )
    parser.add_argument(
        "--new-knobs", action="store_true", help="random scenarios also draw later knobs"
    )
    parser.add_argument(
        "--mode",
        choices=[*MODES, "all"],
        default="all",
        help="engine loop of the random scenarios (all: round-robin sync, async, spec)",
    )
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args(argv)
    if not args.scenarios and not args.random:
        parser.error("give scenario files and/or --random N")

    venv = VLLM_VENVS.get(args.vllm_version) or host_venv(args.vllm_version)
    if args.vllm_version not in VLLM_VENVS and not (args.vllm_path or args.vllm_python):
        parser.error(f"vLLM {args.vllm_version} has no venv here: give --vllm-path")
    python = args.vllm_python or str(REPO_ROOT / venv / "bin" / "python")
    workdir = Path(tempfile.mkdtemp(prefix="compare-"))
    comparer = Comparer(python, workdir, args.vllm_path)
    failed = 0
    try:
        for path in args.scenarios:
            data = json.loads(path.read_text())
            data.setdefault("config", {})["vllm_version"] = args.vllm_version
            diff, ours, ref = comparer.compare(data)
            if diff is None:
                us_vllm = ref["timing"]["median_step_us"]
                us_ours = ours["timing"]["median_step_us"]
                print(
                    f"{path}: identical ({len(ours['steps'])} steps; median step: "
                    f"vLLM {us_vllm} us, ours {us_ours} us)"
                )
            else:
                failed += 1
                print(f"{path}: " + format_difference(diff, ours))

        if args.random:
            rng = random.Random(args.seed)
            args.mismatch_dir.mkdir(parents=True, exist_ok=True)
            by_sig: dict[str, list[str]] = defaultdict(list)
            for i in range(args.random):
                mode = MODES[i % len(MODES)] if args.mode == "all" else args.mode
                name = f"rand{'_stress' if args.stress else ''}_{mode}_s{args.seed}_{i:04d}"
                data = random_scenario(
                    rng, name, args.stress, mode, args.vllm_version, args.new_knobs
                )
                diff, ours, ref = comparer.compare(data)
                if diff is None:
                    continue
                failed += 1
                sig = signature(diff)
                by_sig[sig].append(name)
                base = args.mismatch_dir / name
                Path(f"{base}.json").write_text(json.dumps(data, indent=1) + "\n")
                Path(f"{base}.ours.json").write_text(json.dumps(ours, indent=1) + "\n")
                Path(f"{base}.vllm.json").write_text(json.dumps(ref, indent=1) + "\n")
                text = format_difference(diff, ours)
                if args.shrink:
                    small = shrink(data, sig, comparer.check)
                    small["name"] = name + "_min"
                    Path(f"{base}.min.json").write_text(json.dumps(small, indent=1) + "\n")
                    d2, o2, _ = comparer.compare(small)
                    detail = "identical?" if d2 is None else format_difference(d2, o2)
                    text += f"\n\nminimised ({base}.min.json):\n{detail}"
                Path(f"{base}.diff.txt").write_text(text + "\n")
                if not args.quiet:
                    print(f"{name}: " + text.splitlines()[0])
            print(
                f"random: {args.random} scenarios, seed {args.seed}: "
                f"{sum(len(v) for v in by_sig.values())} mismatching (kept in {args.mismatch_dir})"
            )
            for sig, names in sorted(by_sig.items(), key=lambda kv: -len(kv[1])):
                print(f"  {len(names):4d}  {sig}   e.g. {', '.join(names[:3])}")
    finally:
        comparer.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
