"""SessionState keeps long sessions bounded and resumes exactly from a checkpoint."""

from __future__ import annotations

import json

from app.frames.convert import event_to_frame
from app.frames.fold import SessionState
from app.frames.row_index import MAX_DONE_ROWS
from engine.engine import Engine
from engine.events import ListSink
from engine.faults import SchedulerAssertion
from engine.request import SamplingParams
from engine.runner.sim import SimRunner
from protocol.codes import FrameType, SegmentKind, SessionEvent
from tests.engine.helpers import make_config


def _frames(n_requests: int) -> list[tuple[str, dict]]:  # type: ignore[type-arg]
    sink = ListSink()
    engine = Engine(make_config(max_num_seqs=64, max_num_batched_tokens=512), SimRunner(), sink)
    for i in range(n_requests):
        engine.add_request(f"r{i}", [5 + i % 7, 9, 11], SamplingParams(max_tokens=2))
    while engine.has_unfinished_requests():
        engine.step()
    return [(kind, dict(data)) for kind, data in map(event_to_frame, sink.events)]


def test_old_finished_rows_are_dropped_and_checkpoints_resume_identically() -> None:
    frames = _frames(MAX_DONE_ROWS + 300)
    full = SessionState("s")
    half = len(frames) // 2
    for seq, (kind, data) in enumerate(frames[:half], 1):
        full.apply(kind, seq, data)
    resumed = SessionState.from_checkpoint(json.loads(json.dumps(full.to_checkpoint())))
    for seq, (kind, data) in enumerate(frames[half:], half + 1):
        full.apply(kind, seq, data)
        resumed.apply(kind, seq, data)
    assert len(full.requests) == MAX_DONE_ROWS
    assert full.snapshot()["totals"]["dropped_rows"] == 300
    assert "r0" not in full.requests and f"r{MAX_DONE_ROWS + 299}" in full.requests
    assert resumed.snapshot() == full.snapshot()
    assert resumed.latency_summary() == full.latency_summary()


def test_a_columns_snapshot_holds_the_same_rows() -> None:
    state = SessionState("s")
    for seq, (kind, data) in enumerate(_frames(40)[:60], 1):
        state.apply(kind, seq, data)
    rows = state.snapshot()["requests"]
    compact = state.snapshot(columns=True)["requests"]
    assert rows and [dict(zip(compact["columns"], r, strict=True)) for r in compact["rows"]] == rows
    assert any(seg[2] is not None for r in rows for seg in r["segments"])

    # The snapshot is a copy: folding more frames does not change one already taken.
    before = json.dumps(rows)
    for seq, (kind, data) in enumerate(_frames(40)[60:], 61):
        state.apply(kind, seq, data)
    assert json.dumps(rows) == before


def test_a_columns_snapshot_keeps_the_latest_plans() -> None:
    state = SessionState("s")
    for seq, (kind, data) in enumerate(_frames(4400), 1):
        state.apply(kind, seq, data)
    full = [h["step"] for h in state.snapshot()["history"] if "plan" in h]
    compact = [h["step"] for h in state.snapshot(columns=True)["history"] if "plan" in h]
    assert len(full) > 64 and compact == full[-64:]


def test_every_segment_is_of_a_segment_kind() -> None:
    # A small KV pool: requests wait, prefill, decode and are preempted.
    sink = ListSink()
    engine = Engine(make_config(max_num_seqs=4, num_gpu_blocks=12), SimRunner(), sink)
    for i in range(8):
        engine.add_request(f"r{i}", [3 + i] * 12, SamplingParams(max_tokens=16))
    state = SessionState("s")
    seq, seen = 0, set()
    while engine.has_unfinished_requests():
        engine.step()
        for kind, data in (event_to_frame(e) for e in sink.events):
            seq += 1
            state.apply(kind, seq, data)
            if kind == "iteration":
                kinds = {seg[0] for r in state.requests.values() for seg in r["segments"]}
                assert kinds <= set(SegmentKind), kinds
                seen |= kinds
        sink.events.clear()
    assert seen == set(SegmentKind)


def test_a_failed_engine_is_in_every_later_snapshot() -> None:
    # The frame the engine host sends when vLLM's assertion would stop the engine.
    fault = SchedulerAssertion(3, "num_new_tokens == 1 + self.num_spec_tokens", "cut to 4")
    state = SessionState("s")
    state.apply(FrameType.SESSION, 1, {"event": SessionEvent.OPENED, "name": "n"})
    state.apply(FrameType.SESSION, 2, {"event": SessionEvent.FAILED, **fault.as_dict()})
    state.apply(FrameType.SESSION, 3, {"event": SessionEvent.STATE, "paused": True})
    snap = state.snapshot()
    assert snap["meta"]["failure"] == fault.as_dict() and snap["paused"]
    assert "step" not in snap["meta"] and snap["meta"]["name"] == "n"
    resumed = SessionState.from_checkpoint(json.loads(json.dumps(state.to_checkpoint())))
    assert resumed.snapshot()["meta"]["failure"] == fault.as_dict()


def test_itl_samples_are_each_requests_gaps_between_its_tokens() -> None:
    # Requests arriving over the run, long and short: their tokens fall at steps of many
    # lengths (prefill chunks of newcomers stretch a step), and a step's samples share
    # their end time but not their gap.
    sink = ListSink()
    config = make_config(max_num_seqs=16, max_num_batched_tokens=96)
    engine = Engine(config, SimRunner(), sink)
    for i in range(60):
        if i % 3 == 0:
            prompt = [5 + (i * 7 + k) % 200 for k in range(10 + (i * 37) % 150)]
            engine.add_request(f"r{i}", prompt, SamplingParams(max_tokens=3 + (i * 13) % 40))
        engine.step()
    while engine.has_unfinished_requests():
        engine.step()
    frames = [event_to_frame(ev) for ev in sink.events]
    state = SessionState("s")
    last: dict[str, float] = {}
    want: list[float] = []
    for seq, (kind, data) in enumerate(frames, 1):
        state.apply(kind, seq, data)
        if kind == FrameType.ITERATION:
            t_end = round(data["t_start"] + data["duration"], 6)
            for req in data["sampled"]:
                if req in last:
                    want.append(round(t_end - last[req], 6))
                last[req] = t_end
        elif kind == FrameType.REQUEST and data["kind"] in ("finished", "aborted"):
            last.pop(data["req"], None)
    assert len(set(want)) > 5
    assert list(state.latencies.itl) == want[-len(state.latencies.itl) :]
    assert len(state.latencies.itl) == min(len(want), state.latencies.itl.maxlen or 0)
