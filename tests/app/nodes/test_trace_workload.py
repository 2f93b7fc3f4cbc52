"""`--workload trace:FILE` reads the trace line by line as the engine's clock goes
(app.nodes.trace_workload): every request is added once, in line order, at its timestamp
(kept as its arrival time), with the trace's lengths and its block chain; a bad or
unsorted trace is refused before anything runs, naming the line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.nodes.trace_workload import load_trace_workload
from engine.config import CacheConfig, EngineConfig, SchedulerConfig
from engine.engine import Engine
from engine.events import ListSink
from engine.runner.sim import SimRunner
from engine.virtual_clock import VirtualClock
from protocol.codes import RequestMark
from tests.engine.trace_gen import generate_trace, write_trace

B = 32
CONFIG = EngineConfig(
    SchedulerConfig(max_num_batched_tokens=2048, max_num_seqs=16, max_model_len=2048),
    CacheConfig(block_size=16, num_gpu_blocks=2000),
)


def test_a_trace_is_played_line_by_line_at_its_timestamps(tmp_path: Path) -> None:
    rows = generate_trace(80, B, seed=3)
    trace = write_trace(tmp_path / "t.jsonl", rows)
    workload = load_trace_workload(str(trace), CONFIG, B)
    assert workload.num_requests == len(rows) and workload.name == "trace t.jsonl"
    clock = VirtualClock()
    sink = ListSink()
    engine = Engine(CONFIG, SimRunner(), sink, clock=clock)
    arrivals = workload.arrivals()
    for _ in range(100_000):
        arrivals(engine)
        if engine.has_unfinished_requests():
            engine.step()
        elif arrivals.done:
            break
        else:
            due = arrivals.next_due_ms
            assert due is not None
            clock.jump_to(due / 1000.0)  # idle until the next line is due
    assert arrivals.done and arrivals.num_added == len(rows)
    marks = [e for e in sink.request_events() if e.kind == RequestMark.ARRIVED]
    assert [e.req_id for e in marks] == [f"trace-{i}" for i in range(len(rows))]
    assert [e.t * 1000.0 for e in marks] == pytest.approx([r["timestamp"] for r in rows])
    # Each arrival is recorded by its block chain (what a re-run rebuilds the prompt
    # from), never its tokens written out.
    for mark, row in zip(marks, rows, strict=True):
        assert "prompt_token_ids" not in mark.detail
        assert mark.detail["num_prompt_tokens"] == row["input_length"]
        assert mark.detail["trace_prompt"]["hash_ids"] == row["hash_ids"]
        assert mark.detail["trace_prompt"]["input_length"] == row["input_length"]
    finished = {e.req_id: e.detail for e in sink.request_events()
                if e.kind == RequestMark.FINISHED}  # fmt: skip
    assert len(finished) == len(rows)
    for i, row in enumerate(rows):
        assert finished[f"trace-{i}"]["num_output_tokens"] == row["output_length"]


def test_an_unsorted_or_bad_trace_is_refused_before_it_runs(tmp_path: Path) -> None:
    rows = generate_trace(5, B, seed=1)
    unsorted = [*rows[:3], {**rows[3], "timestamp": 0}, rows[4]]
    trace = tmp_path / "u.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in unsorted))
    assert rows[2]["timestamp"] != 0
    with pytest.raises(ValueError, match=r"line 4: timestamp 0 is before line 3's .* sorted"):
        load_trace_workload(str(trace), CONFIG, B)
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="no requests"):
        load_trace_workload(str(empty), CONFIG, B)
