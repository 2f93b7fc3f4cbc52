"""The engine's waiting reasons are compact (a default and its exceptions, never one entry
per waiting request), and resolve to every waiting request's reason: the requests a
result fold follows from the events alone are exactly the scheduler's waiting queue."""

from __future__ import annotations

import pytest

from engine.events import IterationEvent, RequestEvent
from engine.result_fold import follow_waiting
from protocol.codes import RequestMark, WaitingReason
from tests.engine.helpers import busy_run


@pytest.mark.parametrize("vllm_version", ["0.20", "0.34"])
def test_compact_reasons_resolve_over_the_waiting_queue(vllm_version: str) -> None:
    events, waiting_after = busy_run(vllm_version)
    followed: dict[str, None] = {}
    seen: set[str] = set()
    aborted: set[str] = set()
    for ev in events:
        if isinstance(ev, RequestEvent):
            if ev.kind == RequestMark.ABORTED:
                aborted.add(ev.req_id)
            continue
        assert isinstance(ev, IterationEvent)
        follow_waiting(followed, ev, aborted)
        aborted.clear()
        waiting = waiting_after[ev.step]
        assert set(followed) == set(waiting), ev.step
        reasons = ev.waiting_reasons
        assert bool(reasons) == bool(waiting)
        assert set(reasons.exceptions) <= set(waiting)
        assert len(reasons.exceptions) <= 1 + 4  # the head, the cache-aware window
        full = reasons.resolve(waiting)
        assert set(full) == set(waiting)
        seen |= set(full.values())
    want = {"token_budget", "max_num_seqs", "kv_blocks", "policy_order", "paused"}
    want.add("preemption_this_step")
    if vllm_version == "0.34":
        want.add(WaitingReason.CACHE_AWARE_ORDER)
    assert want <= seen, seen
