"""The waiting gates a scenario file cannot reach, under vLLM's real scheduler.

Runs in a vLLM venv with the repository on PYTHONPATH (tests/vllm/test_waiting_gates.py):

    .venv-vllm/bin/python tools/vllm_gates_drive.py --out RESULT.json

One observed scheduler (built like tools/vllm_reference.py; max_num_seqs 2, so requests
queue) gets plain requests and one with a JSON-schema structured output: vLLM's own Request
puts that one in WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR, and with no grammar compiler
running here its grammar never arrives, so vLLM skips it at every step. Midway vLLM's
scheduler is paused (`set_pause_state(PAUSED_ALL)`) for PAUSED_STEPS steps. The result:
every iteration frame the observer built (its sender streams to a dead address and keeps
them), with the steps that were paused, and the structured request's id.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
os.environ["BATCHSCOPE_URL"] = "ws://127.0.0.1:9/ws/ingest"  # nothing listens: frames stay

from vllm.sampling_params import SamplingParams, StructuredOutputsParams  # noqa: E402
from vllm.v1.core.sched.interface import PauseState  # noqa: E402
from vllm.v1.request import Request  # noqa: E402

from engine.scenario import parse_scenario, prompt_tokens  # noqa: E402
from tools.vllm_adapter_drive import DriveScheduler  # noqa: E402
from tools.vllm_drive import plain_output  # noqa: E402
from tools.vllm_reference import build_scheduler  # noqa: E402

CONFIG = {
    "max_num_batched_tokens": 64,
    "max_num_seqs": 2,
    "max_model_len": 256,
    "block_size": 16,
    "num_gpu_blocks": 64,
    "enable_prefix_caching": False,
}
STRUCTURED = "json-1"
PAUSE_AT, PAUSED_STEPS, STEPS = 4, 3, 12


def _request(req_id: str, i: int, structured: bool) -> Request:
    params = SamplingParams(
        max_tokens=6,
        ignore_eos=True,
        temperature=0.0,
        structured_outputs=StructuredOutputsParams(json={"type": "object"}) if structured else None,
    )
    return Request(
        request_id=req_id,
        prompt_token_ids=prompt_tokens(i, 24),
        sampling_params=params,
        pooling_params=None,
        arrival_time=float(i),
    )


def run() -> dict[str, Any]:
    scenario = parse_scenario({"name": "gates", "config": dict(CONFIG), "requests": []})
    sched: Any = build_scheduler(scenario, DriveScheduler)
    sched.add_request(_request(STRUCTURED, 0, structured=True))
    for i in range(1, 6):
        sched.add_request(_request(f"r{i}", i, structured=False))
    paused: list[int] = []
    for step in range(STEPS):
        if step == PAUSE_AT:
            sched.set_pause_state(PauseState.PAUSED_ALL)
        if step == PAUSE_AT + PAUSED_STEPS:
            sched.set_pause_state(PauseState.UNPAUSED)
        if PAUSE_AT <= step < PAUSE_AT + PAUSED_STEPS:
            paused.append(step)
        out = sched.schedule()
        sched.update_from_output(out, plain_output(sched, out))
    status = str(sched.requests[STRUCTURED].status)
    sender = sched.batchscope
    sched.close(1.0)
    frames = [json.loads(text) for _, text in sender.frames.history]
    return {
        "structured": STRUCTURED,
        "structured_status": status,
        "paused_steps": paused,
        "iterations": [f["data"] for f in frames if f["type"] == "iteration"],
        "observer_errors": sched.observer_errors,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.write_text(json.dumps(run()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
