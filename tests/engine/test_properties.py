"""Hypothesis over random traces and configs: the scheduler's invariants always hold."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.engine import Engine
from engine.events import ListSink
from engine.request import SamplingParams
from engine.runner.sim import SimRunner
from tests.engine.helpers import check_invariants, make_config


@st.composite
def traces(draw: st.DrawFn) -> tuple[dict[str, object], list[tuple[int, int, int, int, int]]]:
    block_size = draw(st.sampled_from([1, 2, 4, 8, 16]))
    max_num_seqs = draw(st.integers(1, 8))
    budget = draw(st.integers(max_num_seqs, 64))
    chunked = draw(st.booleans())
    max_model_len = 64
    if not chunked:
        budget = max(budget, max_model_len)
    knobs = {
        "max_num_batched_tokens": budget,
        "max_num_seqs": max_num_seqs,
        "max_model_len": max_model_len,
        "long_prefill_token_threshold": draw(st.sampled_from([0, 0, 1, 3, 8])),
        "enable_chunked_prefill": chunked,
        "policy": draw(st.sampled_from(["fcfs", "priority"])),
        "scheduler_reserve_full_isl": draw(st.booleans()),
        "block_size": block_size,
        "num_gpu_blocks": draw(st.integers(2, 40)),
        "enable_prefix_caching": draw(st.booleans()),
    }
    # (arrival step, prompt length, max_tokens, priority, shared-prefix group)
    reqs = draw(
        st.lists(
            st.tuples(
                st.integers(0, 6),
                st.integers(1, 40),
                st.integers(1, 16),
                st.integers(0, 3),
                st.integers(0, 2),
            ),
            min_size=1,
            max_size=10,
        )
    )
    return knobs, reqs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces())
def test_invariants_hold_and_every_request_finishes_exactly(trace) -> None:  # type: ignore[no-untyped-def]
    knobs, reqs = trace
    config = make_config(**knobs)  # type: ignore[arg-type]
    sink = ListSink()
    engine = Engine(config, SimRunner(), sink)
    sched = engine.scheduler
    accepted: dict[str, tuple[int, int]] = {}
    by_step: dict[int, list[tuple[str, list[int], int, int]]] = {}
    for i, (arrival, plen, max_tokens, prio, group) in enumerate(reqs):
        # Requests of one group share a prefix, so prefix caching has something to hit.
        prompt = [500 + group * 50 + j for j in range(plen)]
        prompt[-1] = 9000 + i
        by_step.setdefault(arrival, []).append((f"r{i}", prompt, max_tokens, prio))

    totals: dict[str, int] = {}
    lost: dict[str, int] = {}
    hits: dict[str, int] = {}
    for step_no in range(600):
        for req_id, prompt, max_tokens, prio in by_step.get(step_no, []):
            reason = engine.add_request(req_id, prompt, SamplingParams(max_tokens=max_tokens), prio)
            if reason is None:
                accepted[req_id] = (len(prompt), max_tokens)
        if step_no > max(by_step) and not engine.has_unfinished_requests():
            break
        ev = engine.step()
        assert ev.num_scheduled_tokens <= ev.max_num_batched_tokens
        assert len(ev.chunks) <= ev.max_num_seqs
        assert ev.num_running <= ev.max_num_seqs
        check_invariants(sched)
        for c in ev.chunks:
            totals[c.req_id] = totals.get(c.req_id, 0) + c.num_tokens
            hits[c.req_id] = hits.get(c.req_id, 0) + c.num_prefix_hit_tokens
        for p in ev.preempted:
            lost[p.req_id] = lost.get(p.req_id, 0) + p.tokens_lost
    assert not engine.has_unfinished_requests(), "the trace did not drain"

    finished = {e.req_id: e.detail for e in sink.request_events() if e.kind == "finished"}
    assert set(finished) == set(accepted)
    for req_id, (plen, max_tokens) in accepted.items():
        assert finished[req_id]["num_output_tokens"] == max_tokens
        # Each admission starts at its prefix hit; each preemption throws away what was
        # computed; the last sampled token is never fed back in.
        expected = plen + max_tokens - 1 + lost.get(req_id, 0) - hits.get(req_id, 0)
        assert totals[req_id] == expected, req_id
