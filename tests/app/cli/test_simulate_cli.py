"""`batchscope simulate` with the engine-loop flags, as a user runs it (a real process)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import cli


def test_async_flag_runs_the_batch_queue_loop(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = cli("simulate", "scenarios/seed.json", "--async-scheduling", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    steps = result["steps"]
    # Step 0 only schedules (its batch is in flight); step 1 applies step 0's output.
    assert steps[0]["updated_step"] is None and steps[1]["updated_step"] == 0
    sync = cli("simulate", "scenarios/seed.json", "--out", str(tmp_path / "s.json"))
    assert sync.returncode == 0
    sync_result = json.loads((tmp_path / "s.json").read_text())
    assert [s["updated_step"] for s in sync_result["steps"]] == list(range(5))
    for req, rec in result["requests"].items():
        assert rec["output_token_ids"] == sync_result["requests"][req]["output_token_ids"]


def test_spec_flag_and_roofline_preset(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = cli(
        "simulate",
        "scenarios/spec_decode.json",
        "--num-speculative-tokens",
        "2",
        "--cost-model",
        "h100:llama-3-8b",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["total_draft_tokens"] > 0
    assert max(max(s["scheduled_spec_tokens"].values(), default=0) for s in result["steps"]) <= 2
    assert all(s["forward_ms"] > 1.0 for s in result["steps"] if s["scheduled"])


def test_bad_loop_flags_exit_2_with_one_message(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = cli("simulate",
        "scenarios/seed.json", "--async-scheduling", "--num-speculative-tokens", "2",
        "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 2
    assert "sync scheduling" in proc.stderr and not out.exists()
    proc = cli("simulate", "scenarios/seed.json", "--cost-model", "b999:llama-3-8b")
    assert proc.returncode == 2 and "unknown GPU" in proc.stderr


def test_vllm_version_takes_every_release_and_refuses_others(tmp_path: Path) -> None:
    # async_placeholders parts at step 0 with lone_request_uncapped (0.31): releases
    # before it decide as 0.20, 0.31 on as 0.33 on this scenario.
    first: dict[str, dict[str, int]] = {}
    for release in ("0.20", "0.30", "0.31.2"):
        out = tmp_path / f"{release}.json"
        proc = cli("simulate", "scenarios/async_placeholders.json",
            "--vllm-version", release, "--out", str(out),
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        first[release] = json.loads(out.read_text())["steps"][0]["scheduled"]
    assert first == {"0.20": {"A": 4}, "0.30": {"A": 4}, "0.31.2": {"A": 8}}
    for unknown in ("0.19", "0.35"):
        proc = cli("simulate", "scenarios/seed.json", "--vllm-version", unknown)
        assert proc.returncode == 2
        assert "from 0.20 to 0.34" in proc.stderr and "Traceback" not in proc.stderr


def test_vllm_version_validates_the_file_as_that_release(tmp_path: Path) -> None:
    # A threshold above max_model_len: vLLM 0.20 .. 0.26 run it, 0.27 on refuse it. The
    # file names no release (so the newest); the flag's release is the one it is checked as.
    scenario = json.loads(Path("scenarios/seed.json").read_text())
    scenario["config"].pop("vllm_version", None)
    max_model_len = scenario["config"].get("max_model_len", 2048)
    scenario["config"]["long_prefill_token_threshold"] = max_model_len + 1
    path = tmp_path / "wide_threshold.json"
    path.write_text(json.dumps(scenario))
    out = tmp_path / "r.json"
    proc = cli("simulate", str(path), "--vllm-version", "0.20", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["completed"] == len(scenario["requests"])
    proc = cli("simulate", str(path), "--vllm-version", "0.27", "--out", str(out))
    assert proc.returncode == 2
    assert "cannot be greater than max_model_len" in proc.stderr
    assert "vLLM 0.27" in proc.stderr and "Traceback" not in proc.stderr


def test_the_streamed_out_equals_the_in_memory_result_and_a_closed_reader_is_harmless(
    tmp_path: Path,
) -> None:
    """`--out` is written as the run goes; it loads to run_scenario's result. `--table`
    prints each step as it ends: a reader that stops early (`| head -2`) does not stop the
    run, nor its --out."""
    import subprocess
    import sys

    from engine.scenario import load_scenario
    from engine.simulate import run_scenario
    from tests.conftest import ROOT

    # 3,000 steps: a table (~200 kB) past any pipe's buffer, so the run is still printing
    # when the reader goes.
    scenario = tmp_path / "long.json"
    scenario.write_text(json.dumps({
        "name": "long",
        "config": {"max_num_batched_tokens": 512, "max_num_seqs": 8, "block_size": 16,
                   "num_gpu_blocks": 4000, "max_model_len": 4096},
        "requests": [{"id": f"r{i}", "arrival_step": 0, "prompt_len": 50, "max_tokens": 3000}
                     for i in range(8)],
    }))  # fmt: skip
    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "simulate", str(scenario), "--table",
         "--out", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    header = proc.stdout.readline()
    assert header.split()[0] == "step"
    proc.stdout.close()  # the reader goes away after one line
    assert proc.wait(timeout=120) == 0
    assert "Traceback" not in proc.stderr.read()
    whole = run_scenario(load_scenario(scenario))
    streamed = json.loads(out.read_text())
    for result in (whole, streamed):
        result.pop("timing")
    assert streamed == whole and streamed["num_steps"] >= 3000
