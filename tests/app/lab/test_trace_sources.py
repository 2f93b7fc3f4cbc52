"""A Mooncake trace as a workload everywhere one is taken: `batchscope sweep trace:FILE`,
an uploaded source in /lab (a real server on loopback), and `serve --workload
trace:FILE` (a real server process playing the trace at its timestamps). Bad traces:
exit 2 / 422 naming the line."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.app.lab.test_lab_api import start, wait_for
from tests.conftest import ROOT, TOKEN, LiveServer, cli, free_port, wait_healthy
from tests.engine.trace_gen import generate_trace, write_trace
from tests.lifeline import die_with_us

B = 32
BAD_LINE = '{"timestamp": 3, "input_length": 10, "hash_ids": []}'


def test_sweep_takes_a_trace(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", generate_trace(300, B, seed=5))
    out = tmp_path / "sweep.json"
    done = cli("sweep", f"trace:{trace}", "--block-tokens", str(B), "--knob",
               "max_num_batched_tokens=128,1024", "--workers", "1", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert data["source"] == {"kind": "trace", "label": f"trace:{trace}"}
    metrics = [p["metrics"] for p in data["points"]]
    assert [m["requests_finished"] for m in metrics] == [300.0, 300.0]
    assert metrics[0]["steps"] > metrics[1]["steps"]  # a smaller budget takes more steps
    bad = tmp_path / "bad.jsonl"
    bad.write_text(trace.read_text().splitlines()[0] + "\n" + BAD_LINE + "\n")
    done = cli("sweep", f"trace:{bad}", "--block-tokens", str(B), "--knob", "max_num_seqs=4,8")
    assert done.returncode == 2
    assert f"{bad}: line 2: missing field output_length" in done.stderr


def test_lab_takes_an_uploaded_trace(live_server: LiveServer, tmp_path: Path) -> None:
    text = "".join(json.dumps(r) + "\n" for r in generate_trace(200, B, seed=9))
    body = {"source": "trace", "trace_jsonl": text, "trace_name": "prod.jsonl",
            "block_tokens": B, "knob": "max_num_seqs", "values": "2,32"}  # fmt: skip
    with live_server.client() as c:
        data = wait_for(c, start(c, body), lambda d: d["progress"]["finished"], timeout=120)
        assert data["status"] == "done", data
        assert data["source"]["label"] == "trace prod.jsonl"
        assert [p["metrics"]["requests_finished"] for p in data["points"]] == [200.0, 200.0]
        # Form data, as the page posts it, works the same; a bad line is a 422 naming it.
        resp = c.post("/api/lab/sweeps", data={**body, "trace_jsonl": text + BAD_LINE + "\n"})
        assert resp.status_code == 422
        assert "prod.jsonl: line 201: missing field output_length" in resp.json()["detail"]


@contextlib.contextmanager
def serve_trace(trace: Path, *extra: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    port = free_port()
    cmd = [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--runner", "sim",
           "--workload", f"trace:{trace}", "--trace-block-tokens", str(B), "--token", TOKEN,
           "--database-url", "sqlite://", *extra]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, preexec_fn=die_with_us())  # fmt: skip
    try:
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_serve_plays_a_trace_at_its_timestamps(tmp_path: Path) -> None:
    rows = generate_trace(40, B, seed=2)
    trace = write_trace(tmp_path / "t.jsonl", rows)
    with serve_trace(trace) as (proc, url):
        assert wait_healthy(proc, url, 60)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=url, headers=headers, timeout=10) as c:
            deadline = time.monotonic() + 120
            while True:
                state = c.get("/api/state").json()
                done = [r for r in state["requests"] if r["status"] == "FINISHED"]
                if len(done) == len(rows):
                    break
                assert time.monotonic() < deadline, state["requests"][:3]
                time.sleep(0.3)
            sid = state["session"]
            got = c.get(f"/api/sessions/{sid}/export?format=mooncake&block_tokens={B}")
            back = [json.loads(line) for line in got.text.splitlines()]
    # Played live on the wall clock, each request keeps the time it was due; lengths and
    # shared blocks come back exactly.
    assert [(r["input_length"], r["output_length"], r["hash_ids"]) for r in back] == [
        (r["input_length"], r["output_length"], r["hash_ids"]) for r in rows
    ]
    for mine, theirs in zip(back, rows, strict=True):
        assert mine["timestamp"] == theirs["timestamp"]  # type: ignore[comparison-overlap]


def test_serve_refuses_a_bad_trace(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", generate_trace(3, B))
    long_line = {"timestamp": 99999, "input_length": 5000, "output_length": 10, "hash_ids": []}
    trace.write_text(trace.read_text() + json.dumps(long_line) + "\n")
    with serve_trace(trace) as (proc, _url):  # max_model_len 1024 by default
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "line 4: input_length 5000 + output_length 10 = 5010 tokens does not fit " \
        "max_model_len 1024" in out  # fmt: skip


def _capped_scenario(tmp_path: Path, max_steps: int) -> Path:
    """A trace as a compact scenario (import-trace's form) whose config caps the steps."""
    from engine.mooncake import parse_trace, trace_scenario

    rows = parse_trace([json.dumps(r) for r in generate_trace(60, B, seed=4)], B)
    data = trace_scenario(rows, B, config={"max_steps": max_steps})
    assert "trace_prompt" in data["requests"][0] and "prompt_token_ids" not in data["requests"][0]
    path = tmp_path / "capped.json"
    path.write_text(json.dumps(data))
    return path


def test_a_run_cut_short_exits_3_and_is_never_complete(tmp_path: Path) -> None:
    capped = _capped_scenario(tmp_path, 5)
    result = tmp_path / "result.json"
    done = cli("simulate", str(capped), "--out", str(result))
    assert done.returncode == 3, done.stderr
    assert "incomplete: stopped by the step cap (max_steps) at step 5" in done.stderr
    data = json.loads(result.read_text())
    assert data["complete"] is False and data["stopped"]["reason"] == "max_steps"
    out = tmp_path / "sweep.json"
    done = cli("sweep", str(capped), "--knob", "max_num_seqs=2,8", "--workers", "1",
               "--out", str(out))  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert "2 run(s) INCOMPLETE" in done.stdout
    swept = json.loads(out.read_text())
    assert swept["complete"] is False
    assert [p["complete"] for p in swept["points"]] == [False, False]
    assert all(p["stopped"]["at_step"] == 5 for p in swept["points"])
    whole = _capped_scenario(tmp_path, 100_000)
    assert cli("simulate", str(whole), "--out", str(result)).returncode == 0
    assert json.loads(result.read_text())["complete"] is True


def test_sweep_max_steps_sets_the_cap_of_a_trace_or_a_scenario(tmp_path: Path) -> None:
    """`sweep --max-steps N`: a trace (whose cap is the default) or a scenario whose config
    caps the steps runs to N steps; past its end it is complete; 0 is refused (exit 2)."""
    trace = write_trace(tmp_path / "t.jsonl", generate_trace(60, B, seed=4))
    out = tmp_path / "sweep.json"
    done = cli("sweep", f"trace:{trace}", "--block-tokens", str(B), "--knob", "max_num_seqs=8",
               "--workers", "1", "--max-steps", "7", "--out", str(out))  # fmt: skip
    assert done.returncode == 3, done.stderr
    (point,) = json.loads(out.read_text())["points"]
    assert point["stopped"]["reason"] == "max_steps" and point["stopped"]["at_step"] == 7
    capped = _capped_scenario(tmp_path, 5)  # its own config.max_steps: 5
    done = cli("sweep", str(capped), "--knob", "max_num_seqs=8", "--workers", "1",
               "--max-steps", "100000", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [p["complete"] for p in json.loads(out.read_text())["points"]] == [True]
    done = cli("sweep", str(capped), "--knob", "max_num_seqs=8", "--max-steps", "0")
    assert done.returncode == 2 and "--max-steps: must be at least 1" in done.stderr


def test_the_lab_marks_a_sweep_cut_short_incomplete(
    live_server: LiveServer, tmp_path: Path
) -> None:
    body = {"source": "scenario", "scenario_json": _capped_scenario(tmp_path, 5).read_text(),
            "knob": "max_num_seqs", "values": "2,32"}  # fmt: skip
    with live_server.client() as c:
        sweep = start(c, body)
        data = wait_for(c, sweep, lambda d: d["progress"]["finished"], timeout=120)
        assert data["status"] == "incomplete", data
        assert "2 run(s) cut short" in data["error"]
        assert [p["stopped"]["unfinished"] > 0 for p in data["points"]] == [True, True]
        assert all("stopped" not in p["metrics"] for p in data["points"])
        page = c.get(f"/lab/sweeps/{sweep}").text
        assert page.count(">incomplete</span>") >= 2
        assert "stopped by the step cap (max_steps) at step 5" in page
