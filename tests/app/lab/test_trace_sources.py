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
