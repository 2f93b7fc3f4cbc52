"""The bus's pieces on their own: the per-step summary of a real engine's frames and the
fleet view's rows (rates, stalls, missed steps). The flight recorder's bounds (the producer
core's history): tests/protocol/test_producer.py."""

from __future__ import annotations

from app.bus.fleet import FleetView
from app.nodes.producer import QueueSink
from engine.config import CacheConfig, EngineConfig, SchedulerConfig
from engine.engine import Engine
from engine.request import SamplingParams
from engine.runner.sim import SimRunner
from protocol.bus import SUMMARY_FIELDS, as_dict, step_summary, subject, token


def test_summary_of_real_engine_steps() -> None:
    sink = QueueSink()
    config = EngineConfig(
        scheduler=SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=4, max_model_len=256),
        cache=CacheConfig(block_size=16, num_gpu_blocks=8),
    )
    engine = Engine(config, SimRunner(), sink)
    for i in range(6):
        engine.add_request(f"r{i}", list(range(i, i + 60)), SamplingParams(max_tokens=4))
    rows = []
    for _ in range(30):
        engine.step()
    for kind, data in sink.drain():
        if kind == "iteration":
            rows.append(as_dict(step_summary(data, 1000.0)))
    assert rows and all(set(r) == set(SUMMARY_FIELDS) for r in rows)
    assert sum(r["prefill_tokens"] for r in rows) == 6 * 60
    assert sum(r["finished"] for r in rows) == 6
    assert max(r["waiting"] for r in rows) > 0 and rows[0]["kv_total"] == 7  # 8 less the null block
    assert all(r["prefill_tokens"] + r["decode_tokens"] <= 64 for r in rows)


def _row(step: int, t: float, **kw: float) -> list[float | int]:
    base: dict[str, float | int] = dict.fromkeys(SUMMARY_FIELDS, 0)
    base.update(step=step, t=t, dur_ms=20.0, kv_total=100, **kw)
    return [base[f] for f in SUMMARY_FIELDS]


def test_fleet_view_rows_rates_stalls_and_missed_steps() -> None:
    view = FleetView()
    steps = [_row(1, 99.9, prefill_tokens=50, kv_used=40), _row(2, 99.95, decode_tokens=10)]
    assert view.fold({"node": "a", "session": "s1", "steps": steps}, now=100.0)
    stalled = [_row(5, 100.9, waiting=3, stalled=1, preempted=2)]
    assert view.fold({"node": "a", "session": "s1", "steps": stalled}, now=101.0)
    assert view.fold({"node": "b", "session": "s2", "steps": [_row(1, 100.0)]}, now=101.0)
    assert not view.fold({"node": "c", "session": "s", "steps": [[1, 2]]})
    assert not view.fold({"node": 3, "session": "s", "steps": []})
    a = next(r for r in view.rows(now=101.5) if r["node"] == "a")
    assert a["missed_steps"] == 2 and a["stalls"] == 1 and a["stalled_now"]
    assert a["preemptions"] == 2 and a["waiting"] == 3 and a["step"] == 5
    # 60 tokens and 3 steps over the 1.5 s since the first summary in the window
    assert a["tokens_per_s"] == 40.0 and a["steps_per_s"] == 2.0 and a["kv_pct"] == 0.0
    assert a["age_s"] == 0.5
    assert [r["node"] for r in view.rows("waiting", desc=True)] == ["a", "b"]
    assert [r["node"] for r in view.rows("bogus")] == ["a", "b"]
    assert view.stats()["nodes"] == 2 and view.stats()["steps"] == 4


def test_subjects_are_one_token_per_node() -> None:
    assert token("gpu node.7/*") == "gpu_node_7__"
    assert subject("a.b", "summary") == "batchscope.a_b.summary"
