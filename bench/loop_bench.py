"""Scheduler cost per step in vLLM's other engine loops, N running decodes: async
scheduling (batch queue of 2) and speculative decoding (K drafts per request), ours against
vLLM 0.20.0's AsyncScheduler / Scheduler driven through the same loop in the same run.

Both sides run one generated scenario: ours through engine.simulate (schedule + update +
drafter + event build per step), vLLM's through tools/vllm_reference.py (schedule +
update_from_output + update_draft_token_ids). Target: ratio <= 0.5.

Run: `make bench` (or `python -m bench.loop_bench [N]`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from engine.scenario import parse_scenario
from engine.simulate import run_scenario

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
NUM_SPEC = 4
STEPS = 200


def scenario(mode: str, num_running: int) -> dict[str, Any]:
    config: dict[str, Any] = {
        "max_num_batched_tokens": num_running * (NUM_SPEC + 1) + 64,
        "max_num_seqs": num_running,
        "max_model_len": 4096,
        "block_size": 16,
        "num_gpu_blocks": num_running * 80 + 1,
        "enable_prefix_caching": True,
        "max_steps": STEPS,
    }
    if mode == "async":
        config["async_scheduling"] = True
    else:
        config["num_speculative_tokens"] = NUM_SPEC
    requests = [
        {
            "id": f"r{i}",
            "prompt_token_ids": [1 + (i * 7 + j) % 30000 for j in range(16)],
            "max_tokens": 1000,
        }
        for i in range(num_running)
    ]
    return {"name": f"loop_bench_{mode}", "config": config, "requests": requests}


def vllm_median_us(data: dict[str, Any]) -> float | None:
    if not VLLM_PYTHON.exists():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp, "s.json"), Path(tmp, "r.json")
        src.write_text(json.dumps(data))
        proc = subprocess.run(
            [str(VLLM_PYTHON), "tools/vllm_reference.py", str(src), "--out", str(out)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if proc.returncode != 0:
            print(f"(vLLM run failed: {proc.stderr.strip()[-300:]})")
            return None
        return float(json.loads(out.read_text())["timing"]["median_step_us"])


def main(argv: list[str]) -> int:
    n = int(argv[0]) if argv else 256
    print(f"engine-loop step cost, {n} running decodes, {STEPS} steps, SimRunner")
    print(f"{'loop':>22} {'ours us':>9} {'vLLM 0.20 us':>13} {'ratio':>6} {'target <= 0.5':>13}")
    ok = True
    for mode, label in (("async", "async (batch queue 2)"), ("spec", f"spec decode K={NUM_SPEC}")):
        data = scenario(mode, n)
        result = run_scenario(parse_scenario(data))
        ours = float(result["timing"]["median_step_us"])
        ref = vllm_median_us(data)
        if ref is None:
            print(f"{label:>22} {ours:>9.1f} {'n/a':>13}  (no .venv-vllm: make vllm-venv)")
            continue
        ratio = ours / ref
        ok &= ratio <= 0.5
        extra = ""
        if mode == "spec":
            acc = result["total_accepted_tokens"] / max(1, result["total_draft_tokens"])
            extra = f"   acceptance {acc:.2f}"
        print(
            f"{label:>22} {ours:>9.1f} {ref:>13.1f} {ratio:>6.2f} "
            f"{'yes' if ratio <= 0.5 else 'NO':>13}{extra}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
