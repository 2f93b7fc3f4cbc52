"""How frames become vLLM's counters: KV block residency from block changes, the
speculative-decoding counters, and which sessions count at all (a real hub and Metrics,
frames published as a producer would)."""

from __future__ import annotations

from typing import Any

import pytest

from app.live.engine_stats import Hist
from app.live.hub import EventHub
from app.live.kv_residency import BlockResidency
from app.live.metrics import Metrics
from protocol.frames import request_payload
from protocol.session import session_meta
from tests.app.live.frames import iteration


def test_block_lifetime_idle_and_reuse_gaps() -> None:
    kv = BlockResidency()
    # t=1: r1 allocates blocks 1 and 2; t=2: both freed with their content (cached).
    assert not kv.step(1.0, [[1, "used", "r1", 1], [2, "used", "r1", 1]], {})
    assert not kv.step(2.0, [[1, "cached", None, 0], [2, "cached", None, 0]], {})
    # t=3: r2 hits block 1 (a prefix-cache hit: an access); t=4 r3 shares it.
    hits = {"r2": 1}
    assert not kv.step(3.0, [[1, "used", "r2", 1]], hits)
    assert hits == {"r2": 0}  # the hit accounted for
    assert not kv.step(4.0, [[1, "shared", "r2", 2]], {})
    # t=5: block 2's content is evicted: handed to r4, which had no hit to account for.
    evicted = kv.step(5.0, [[2, "used", "r4", 1]], {})
    assert (evicted.lifetimes_s, evicted.idles_s, evicted.reuse_gaps_s) == ([4.0], [4.0], [])
    # t=6: block 1 freed and cached again; t=9: cleared (its content dropped).
    assert not kv.step(6.0, [[1, "cached", None, 0]], {})
    evicted = kv.step(9.0, [[1, "free", None, 0]], {})
    assert evicted.lifetimes_s == [8.0] and evicted.idles_s == [5.0]
    assert evicted.reuse_gaps_s == [1.0]  # between the accesses at t=3 and t=4
    # A block freed without content (no hash) is not an eviction.
    kv.step(10.0, [[3, "used", "r5", 1]], {})
    assert not kv.step(11.0, [[3, "free", None, 0]], {})
    # Two evicted in one step, in the order of the changes: block 4 was touched five
    # times (only the last four accesses count), block 5 never.
    kv.step(12.0, [[4, "used", "r6", 1], [5, "used", "r6", 1]], {})
    for i, t in enumerate((13.0, 14.0, 16.0, 19.0, 23.0)):
        kv.step(t, [[4, "shared", "r6", 2 + i]], {})
    kv.step(24.0, [[4, "cached", None, 0], [5, "cached", None, 0]], {})
    evicted = kv.step(30.0, [[5, "used", "r7", 1], [4, "free", None, 0]], {})
    assert evicted.lifetimes_s == [18.0, 18.0] and evicted.idles_s == [18.0, 7.0]
    assert evicted.reuse_gaps_s == [2.0, 3.0, 4.0]


def _frame(step: int, **extra: Any) -> dict[str, Any]:
    """`a` decoding while `b` waits for KV blocks and `c` is held back."""
    waiting = {"num_waiting": 2, "num_waiting_end": 2}
    reasons = {"b": "kv_blocks", "c": "paused"}
    return iteration(step, 1, 10, **waiting, waiting_reasons=reasons, **extra)


@pytest.fixture
def hub_metrics() -> tuple[EventHub, Metrics]:
    hub = EventHub()
    return hub, Metrics(hub)


def test_spec_decode_counters_follow_the_frames(hub_metrics: tuple[EventHub, Metrics]) -> None:
    """Real frames of a speculative-decoding run: drafts, draft tokens, accepted tokens and
    accepted positions add up to what the engine verified."""
    from app.frames.convert import event_to_frame
    from engine.events import IterationEvent
    from tests.conftest import ROOT
    from tests.engine.helpers import scenario_events

    hub, metrics = hub_metrics
    events = scenario_events(ROOT / "scenarios" / "spec_decode.json")
    hub.open_session("s1", session_meta("spec", "local", model="m", config={}))
    for ev in events:
        kind, data = event_to_frame(ev)
        hub.publish("s1", kind, data)
    (stats,) = metrics.engines.values()
    its = [ev for ev in events if isinstance(ev, IterationEvent)]
    verified = [
        (len(c.spec_token_ids), ev.accepted_tokens[c.req_id])
        for ev in its
        for c in ev.chunks
        if c.spec_token_ids and c.req_id in ev.accepted_tokens
    ]
    assert verified and stats.counters["vllm:spec_decode_num_drafts"] == len(verified)
    assert stats.counters["vllm:spec_decode_num_draft_tokens"] == sum(d for d, _ in verified)
    accepted = sum(a for _, a in verified)
    assert stats.counters["vllm:spec_decode_num_accepted_tokens"] == accepted > 0
    assert sum(stats.accepted_per_pos.values()) == accepted
    generated = sum(n for ev in its for n in ev.appended_tokens.values())
    assert stats.counters["vllm:generation_tokens"] == generated


def test_waiting_reasons_by_vllm_and_by_batchscope(hub_metrics: tuple[EventHub, Metrics]) -> None:
    hub, metrics = hub_metrics
    hub.open_session("s1", session_meta("spec", "local", model="m", config={}))
    hub.publish("s1", "iteration", _frame(0))
    (stats,) = metrics.engines.values()
    assert stats.labels == ("m", "local")
    text = metrics.exposition().decode()
    assert (
        'vllm:num_requests_waiting_by_reason{engine="local",model_name="m",reason="capacity"} 1.0'
        in text
    )
    assert 'reason="deferred"} 1.0' in text
    ours = 'batchscope:num_requests_waiting_by_reason{engine="local",model_name="m",'
    assert ours + 'reason="kv_blocks"} 1.0' in text
    assert ours + 'reason="paused"} 1.0' in text


def test_reruns_and_relayed_sessions_are_not_counted(hub_metrics: tuple[EventHub, Metrics]) -> None:
    hub, metrics = hub_metrics
    hub.open_session("r1", session_meta("what-if", "rerun", model="m"), live=False)
    # As app.live.relay opens a session another dashboard process serves.
    meta = {**session_meta("elsewhere", "local", model="m"), "relayed": True}
    hub.open_session("p1", meta, live=False, announce=False)
    hub.mark_relayed("p1")
    for sid in ("r1", "p1"):
        hub.publish(sid, "iteration", _frame(0))
    assert metrics.engines == {}


def test_the_local_engine_is_one_series_whatever_its_sessions(
    hub_metrics: tuple[EventHub, Metrics],
) -> None:
    hub, metrics = hub_metrics
    for i in range(12):
        sid = f"s{i}"
        hub.open_session(sid, session_meta("live", "local", model="m"))
        hub.publish(sid, "iteration", _frame(i))
        hub.close_session(sid)
    (stats,) = metrics.engines.values()
    assert stats.labels == ("m", "local") and stats.session == "s11"
    assert 'session="s11"} 1.0' in metrics.exposition().decode()


def test_ended_local_series_of_other_models_are_dropped_after_a_few(
    hub_metrics: tuple[EventHub, Metrics],
) -> None:
    hub, metrics = hub_metrics
    for i in range(12):
        sid = f"s{i}"
        hub.open_session(sid, session_meta("live", "local", model=f"m{i}"))
        hub.publish(sid, "iteration", _frame(0))
        hub.close_session(sid)
    assert sorted(m for m, _ in metrics.engines) == sorted(f"m{i}" for i in range(4, 12))


def test_a_frame_metrics_cannot_count_still_reaches_the_other_listeners(
    hub_metrics: tuple[EventHub, Metrics],
) -> None:
    hub, metrics = hub_metrics
    seen: list[int] = []
    hub.add_listener(
        lambda session, kind, seq, data, text: seen.append(seq)
    )  # the recorder's place
    hub.open_session("s1", session_meta("live", "local", model="m"))
    hub.publish("s1", "request", request_payload("a", "arrived", 0, 0.0, {"num_prompt_tokens": 4}))
    odd = request_payload("a", "finished", 1, 0.5, {"reason": "stop", "num_output_tokens": "two"})
    hub.publish("s1", "request", odd)  # a producer's detail the protocol does not type
    assert seen == [1, 2, 3] and metrics.errors == 1


@pytest.mark.parametrize("version", ["0.20", "0.33"])
def test_prefix_cache_counters_are_the_engines_own(
    hub_metrics: tuple[EventHub, Metrics], version: str
) -> None:
    """vllm:prefix_cache_queries / _hits come from the engine's frames (kv.prefix_queries,
    kv.prefix_hits), counted as the release counts them: 0.20 at every lookup (B's failed
    lookups while it waits for blocks count), 0.33 once per admitted request."""
    from app.frames.convert import event_to_frame
    from engine.config import CacheConfig, EngineConfig, SchedulerConfig
    from engine.engine import Engine
    from engine.events import IterationEvent, ListSink
    from engine.request import SamplingParams
    from engine.runner.sim import SimRunner

    hub, metrics = hub_metrics
    config = EngineConfig(
        SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=4, max_model_len=32),
        CacheConfig(block_size=4, num_gpu_blocks=6),
        vllm_version=version,
    )
    sink = ListSink()
    engine = Engine(config, SimRunner(), sink)
    engine.add_request("A", list(range(100, 116)), SamplingParams(max_tokens=4))
    engine.add_request("B", list(range(500, 508)), SamplingParams(max_tokens=1))
    while engine.has_unfinished_requests():
        engine.step()
    hub.open_session("s1", session_meta("kv", "local", model="m", config=config.as_dict()))
    for ev in sink.events:
        kind, data = event_to_frame(ev)
        hub.publish("s1", kind, data)
    (stats,) = metrics.engines.values()
    its = [ev for ev in sink.events if isinstance(ev, IterationEvent)]
    queries = stats.counters["vllm:prefix_cache_queries"]
    assert queries == sum(ev.prefix_cache_queries for ev in its)
    assert stats.counters["vllm:prefix_cache_hits"] == sum(ev.prefix_cache_hits for ev in its)
    if version == "0.20":
        assert queries > 16 + 8
    else:
        assert queries == 16 + 8
    text = metrics.exposition().decode()
    assert f'vllm:prefix_cache_queries_total{{engine="local",model_name="m"}} {queries:.1f}' in text


def test_prefix_cache_counters_without_the_producers_count(
    hub_metrics: tuple[EventHub, Metrics],
) -> None:
    """A producer whose frames carry no kv.prefix_queries (a vLLM node, a recording made
    before): one lookup per admitted request, from the scheduled rows."""
    hub, metrics = hub_metrics
    hub.open_session("s1", session_meta("node", "local", model="m", config={}))
    frame = iteration(0, 10, 0, new=["a"])
    assert "prefix_queries" not in frame["kv"]
    hub.publish("s1", "iteration", frame)
    (stats,) = metrics.engines.values()
    assert stats.counters["vllm:prefix_cache_queries"] == 10


def test_compact_waiting_reasons_count_as_full_maps() -> None:
    """The same run's frames with compact reasons (`waiting_default` and the exceptions)
    and with full maps give the same counts by reason at every step."""
    from tests.app.frames.both_forms import both_forms

    compact, full = both_forms("0.34")
    counts: list[list[dict[str, int]]] = []
    for frames in (compact, full):
        hub = EventHub()
        metrics = Metrics(hub)
        hub.open_session("s1", session_meta("busy", "local", model="m", config={}))
        seen: list[dict[str, int]] = []
        for kind, data in frames:
            hub.publish("s1", kind, data)
            if kind == "iteration":
                (stats,) = metrics.engines.values()
                seen.append(dict(stats.waiting_reasons))
        counts.append(seen)
    assert counts[0] == counts[1]
    assert sum(1 for c in counts[0] if len(c) > 1) > 10


def test_a_steps_observations_at_once_count_as_one_by_one() -> None:
    # A step's ITLs in one call: the same buckets, count and sum (bit for bit, the same
    # additions in the same order) as observed one by one, bucket bounds included.
    bounds = (0.01, 0.025, 0.05, 0.1, 0.5)
    values = [0.03, 0.03, 0.01, 0.5000001, 0.1, 0.03, 7.0, 0.0, 0.024999, 0.01, 1 / 3, 0.1]
    one, many = Hist(bounds), Hist(bounds)
    for v in values:
        one.observe(v)
    many.observe_all(values[:5])
    many.observe_all([])
    many.observe_all(values[5:])
    assert (many.counts, many.sum, many.count) == (one.counts, one.sum, one.count)
    assert one.cumulative() == [("0.01", 3), ("0.025", 4), ("0.05", 7), ("0.1", 9),
                                ("0.5", 10), ("+Inf", 12)]  # fmt: skip
