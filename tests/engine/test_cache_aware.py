"""vLLM 0.34's cache-aware admission: within the window, a fresh waiting request with a
deeper cached prefix is admitted ahead of one that arrived before it, and the request it
passed waits with `cache_aware_order`, whose detail names who moved ahead and how much of
its prompt was cached (checked against vLLM 0.34.0 in tests/vllm/test_conformance.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.events import ListSink
from engine.scenario import ScenarioError, load_scenario
from engine.simulate import run_scenario
from engine.waiting import waiting_text
from protocol.codes import WaitingReason

SCENARIO = Path(__file__).with_name("cache_aware_admission.json")


def _step3(
    overrides: dict[str, object],
) -> tuple[dict[str, int], dict[str, str], dict[str, object]]:
    sink = ListSink()
    result = run_scenario(load_scenario(SCENARIO, overrides), sink=sink)
    it = sink.iterations()[3]
    plan = {c.req_id: c.num_tokens for c in it.chunks}
    return plan, result["steps"][3]["waiting_reasons"], it.waiting_detail


def test_a_cached_prefix_moves_ahead_and_the_request_it_passed_says_so() -> None:
    plan, reasons, detail = _step3({})
    assert list(plan) == ["A", "C"]  # C arrived after B, with A's 32 tokens cached
    assert reasons == {"B": WaitingReason.CACHE_AWARE_ORDER}
    assert detail["cache_aware_ahead"] == "C" and detail["cache_aware_cached_tokens"] == 32
    assert waiting_text("B", reasons["B"], detail) == (
        "behind C, moved ahead by cache-aware admission: 32 tokens of its prompt are cached "
        "(cache_aware_admission_window 4)"
    )


@pytest.mark.parametrize(
    "overrides",
    [
        {"cache_aware_admission_window": 0},  # off
        {"cache_aware_admission_threshold": 1.0},  # KV usage never reaches it
        {"enable_prefix_caching": False},  # nothing to consult (vLLM ignores the window)
        {"policy": "priority"},  # not a FCFS queue (ignored, as vLLM does)
    ],
)
def test_otherwise_arrival_order_holds(overrides: dict[str, object]) -> None:
    plan, reasons, detail = _step3(overrides)
    assert list(plan) == ["A", "B"]
    assert reasons["C"] != WaitingReason.CACHE_AWARE_ORDER
    assert "cache_aware_ahead" not in detail


def test_releases_before_0_34_have_no_such_knob() -> None:
    with pytest.raises(ScenarioError, match=r"added in 0\.34"):
        load_scenario(SCENARIO, {"vllm_version": "0.33"})
    with pytest.raises(ScenarioError, match="cache_aware_admission_threshold"):
        load_scenario(SCENARIO, {"cache_aware_admission_threshold": 1.5})
