"""Hypothesis over random traces and configs, for each supported vLLM release (0.20 ..
0.33, a test each) and in every engine loop (sync, async with its batch queue, speculative
decoding): the scheduler's invariants always hold, every request finishes with exactly
max_tokens, scheduled work is conserved, and the output tokens equal the sync run's.
Releases that have them also draw max_num_active_seqs, watermark, prefill_schedule_interval
and the adaptive threshold."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.engine import Engine
from engine.events import ListSink
from engine.releases import SUPPORTED, knob_available, release_features
from engine.request import SamplingParams
from engine.runner.sim import SimRunner
from tests.engine.helpers import check_invariants, make_config


@st.composite
def traces(
    draw: st.DrawFn, version: str
) -> tuple[dict[str, object], list[tuple[int, int, int, int, int]]]:
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
    mode = draw(st.sampled_from(["sync", "async", "spec"]))
    if mode == "async":
        knobs["async_scheduling"] = True
    elif mode == "spec":
        knobs["num_speculative_tokens"] = draw(st.integers(1, 6))
    knobs["vllm_version"] = version
    later = {
        "max_num_active_seqs": st.integers(0, max_num_seqs),
        "watermark": st.sampled_from([0.0, 0.0, 0.05, 0.2]),
        "prefill_schedule_interval": st.sampled_from([1, 1, 2, 3]),
        "long_prefill_token_threshold_adaptive": st.booleans(),
    }
    for knob, values in later.items():
        if knob_available(knob, version):
            knobs[knob] = draw(values)
    k = int(knobs.get("num_speculative_tokens", 0))  # type: ignore[call-overload]
    threshold = int(knobs["long_prefill_token_threshold"])  # type: ignore[call-overload]
    if release_features(version).spec_pads_new_decodes and k and 0 < threshold < 1 + k:
        knobs["long_prefill_token_threshold"] = 0  # refused: vLLM 0.25+ would fail on it
    if release_features(version).spec_pads_new_decodes and k and budget < 1 + k:
        # A decode admitted with a full prefix hit (a resumed request) is padded to 1 + K
        # tokens and waits while they exceed the budget: under a budget below 1 + K it
        # never runs, in vLLM 0.25+ as here (the waiting reason says so). Not a trace
        # that can drain.
        knobs["max_num_batched_tokens"] = 1 + k
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


@pytest.mark.parametrize("version", SUPPORTED)
def test_invariants_hold_and_every_request_finishes_exactly(version: str) -> None:
    @settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(traces(version))
    def check(trace) -> None:  # type: ignore[no-untyped-def]
        knobs, reqs = trace
        finished = _run_and_check(knobs, reqs)  # type: ignore[no-untyped-call]
        if knobs.get("async_scheduling") or knobs.get("num_speculative_tokens"):
            sync_knobs = {k: v for k, v in knobs.items() if k not in _LOOP_KNOBS}
            sync_finished = _run_and_check(sync_knobs, reqs)  # type: ignore[no-untyped-call]
            for req_id, detail in finished.items():
                assert detail["output_token_ids"] == sync_finished[req_id]["output_token_ids"]

    check()


# The sync reference run keeps the release's other knobs: outputs never depend on them.
_LOOP_KNOBS = ("async_scheduling", "num_speculative_tokens")


def _run_and_check(knobs, reqs):  # type: ignore[no-untyped-def]
    config = make_config(**knobs)
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
    drafts: dict[str, int] = {}
    accepted_drafts: dict[str, int] = {}
    out_of_running: set[str] = set()
    trimmed: dict[str, int] = {}
    finished_waiting: set[str] = set()
    # 0.25+ pad a new decode to 1 + K tokens: a preempted request that resumes with a full
    # prefix hit then needs up to K more slots than its peak, and where the pool has no
    # room for them it never resumes (vLLM 0.33 stalls the same way): leave those out.
    pad = sched.num_spec_tokens if sched.pad_new_decodes else 0
    room = config.cache.num_usable_blocks * config.cache.block_size
    for step_no in range(600):
        for req_id, prompt, max_tokens, prio in by_step.get(step_no, []):
            if pad and len(prompt) + max_tokens - 1 + pad > room:
                continue
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
            drafts[c.req_id] = drafts.get(c.req_id, 0) + len(c.spec_token_ids)
        for req_id, n in ev.accepted_tokens.items():
            accepted_drafts[req_id] = accepted_drafts.get(req_id, 0) + n
            # Accepted drafts past a stop are computed, then trimmed from the output.
            trimmed[req_id] = trimmed.get(req_id, 0) + n + 1 - ev.appended_tokens[req_id]
        for p in ev.preempted:
            lost[p.req_id] = lost.get(p.req_id, 0) + p.tokens_lost
            out_of_running.add(p.req_id)
        for c in ev.chunks:
            if c.is_new:
                out_of_running.discard(c.req_id)
        for f in ev.finished:
            if f.req_id in out_of_running:
                # Async: the output of a batch in flight finished it while preempted.
                finished_waiting.add(f.req_id)
    assert not engine.has_unfinished_requests(), "the trace did not drain"

    finished = {e.req_id: e.detail for e in sink.request_events() if e.kind == "finished"}
    assert set(finished) == set(accepted)
    for req_id, (plen, max_tokens) in accepted.items():
        assert finished[req_id]["num_output_tokens"] == max_tokens
        # Each admission starts at its prefix hit; each preemption throws away what was
        # computed; the last sampled token is never fed back in; rejected drafts are
        # computed for nothing.
        # A request the output of a batch in flight finished while preempted (async)
        # never recomputed: everything it computed was lost.
        rejected = drafts.get(req_id, 0) - accepted_drafts.get(req_id, 0)
        final = 0 if req_id in finished_waiting else plen + max_tokens - 1
        expected = final + lost.get(req_id, 0) - hits.get(req_id, 0) + rejected
        expected += trimmed.get(req_id, 0)
        assert totals[req_id] == expected, req_id
    return finished
