"""The demo wave (serve's default workload) under the default knobs shows, within its
first steps, what the article explains: a long prompt prefilled in chunks in the same
steps as running decodes, requests waiting for token budget and for KV blocks, and a
preemption followed by the victim's recompute; once the engine has drained and idled
for the pause, the wave plays again. Driven like EngineCore drives it (the hook before
every loop turn, idle turns included), on the sim runner and a virtual clock."""

from __future__ import annotations

from app.settings import Settings
from engine.demo_workload import PAUSE_S, DemoWorkload
from engine.engine import Engine
from engine.events import ListSink
from engine.runner.sim import SimRunner
from engine.virtual_clock import VirtualClock


def test_the_wave_shows_chunks_waiting_and_preemption_and_repeats() -> None:
    clock = VirtualClock()
    sink = ListSink()
    engine = Engine(Settings().engine_config(), SimRunner(), sink, clock=clock)
    demo = DemoWorkload()
    steps_of_wave_1 = 0
    for _ in range(5000):
        demo(engine)
        if engine.has_unfinished_requests():
            engine.step()
            if demo.waves == 1:
                steps_of_wave_1 = engine.step_index
        else:
            clock.advance(0.05)  # EngineCore's idle wait
        if demo.waves == 2:
            break
    assert demo.waves == 2
    events = sink.iterations()
    wave_1 = [e for e in events if e.step < steps_of_wave_1]
    chunk_beside_decode = [
        e.step
        for e in wave_1
        if any(c.is_prefill and not c.sample for c in e.chunks)
        and any(not c.is_prefill for c in e.chunks)
    ]
    assert chunk_beside_decode and chunk_beside_decode[0] < 10
    reasons = {
        r
        for e in wave_1
        for r in (e.waiting_reasons.default, *e.waiting_reasons.exceptions.values())
    }
    assert {"token_budget", "kv_blocks"} <= reasons
    preempted = {p.req_id: e.step for e in wave_1 for p in e.preempted}
    assert preempted and min(preempted.values()) < 80
    recomputed = {
        c.req_id
        for e in wave_1
        for c in e.chunks
        if c.req_id in preempted and e.step > preempted[c.req_id] and c.num_computed_before == 0
    }
    assert recomputed
    # Wave 2 started only after the engine drained and idled for the pause.
    arrivals = [e for e in events if e.arrived]
    second = next(e for e in arrivals if e.step >= steps_of_wave_1)
    last_before = max(e.t_start + e.duration for e in events if e.step < second.step)
    assert second.t_start - last_before >= PAUSE_S - 0.05
