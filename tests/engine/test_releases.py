"""The release table (engine.releases): what each supported vLLM release decides
differently, the knobs only later releases have, and the docs table that shows it."""

from __future__ import annotations

import re
from dataclasses import fields

import pytest

from engine.config import ConfigError, EngineConfig, SchedulerConfig
from engine.outputs import SchedulerOutput
from engine.releases import (
    CHANGES,
    CHECKED,
    DEFAULT_VLLM_VERSION,
    KNOB_SINCE,
    SUPPORTED,
    ReleaseFeatures,
    knob_available,
    nearest_supported,
    normalize_version,
    release_features,
    version_key,
)
from engine.runner.sim import SimRunner
from engine.scenario import ScenarioError, parse_scenario
from engine.simulate import run_scenario
from engine.waiting import waiting_text
from tests.conftest import ROOT
from tests.engine.helpers import make_config, make_request, make_scheduler, reasons, scheduled, step


def test_the_docs_table_is_the_code_table() -> None:
    text = (ROOT / "docs" / "vllm_releases.md").read_text()
    rows = re.findall(r"^\| (0\.\d+) \| .* \| `(\w+)` \| `[^`]+` \|$", text, re.M)
    assert sorted(rows) == sorted((c.since, c.flag) for c in CHANGES)
    # Which releases are selectable and which are checked against vLLM, as the code says.
    assert f"every minor release from {SUPPORTED[0]} to\n{SUPPORTED[-1]}" in text
    assert f"| {', '.join(CHECKED)} | step for step against vLLM itself" in text
    unchecked = [r for r in SUPPORTED if r not in CHECKED]
    assert f"| {unchecked[0]} … {unchecked[-1]} | the per-change release column only" in text


def test_every_flag_is_in_the_table_and_releases_switch_them() -> None:
    flags = {f.name for f in fields(ReleaseFeatures)} - {"version"}
    assert flags == {c.flag for c in CHANGES}
    old, new = release_features("0.20"), release_features("0.34")
    assert not any(getattr(old, f) for f in flags)
    assert all(getattr(new, f) for f in flags)
    assert DEFAULT_VLLM_VERSION == SUPPORTED[-1] == "0.34"


def test_release_names() -> None:
    assert normalize_version("0.33.0") == normalize_version("v0.33") == "0.33"
    assert normalize_version("0.27.1") == normalize_version(0.27) == "0.27"
    assert EngineConfig(vllm_version="0.20.0").vllm_version == "0.20"
    assert EngineConfig(vllm_version="0.25.1").validate().vllm_version == "0.25"
    for unknown in ("0.19", "0.35", "1.0", "0.2x", ""):
        with pytest.raises(ConfigError, match=r"vllm_version: .*from 0\.20 to 0\.34"):
            EngineConfig(vllm_version=unknown).validate()
    assert nearest_supported("0.33.0") == ("0.33", True)
    assert nearest_supported("0.22.0") == ("0.22", True)
    assert nearest_supported("0.32.0+cpu") == ("0.32", True)
    assert nearest_supported("0.19.1") == ("0.20", False)  # none of the table's changes
    assert nearest_supported("0.40.0") == ("0.34", False)
    assert nearest_supported(None) == ("0.34", False)


def test_every_minor_release_from_0_20_to_0_34_is_selectable() -> None:
    assert tuple(f"0.{m}" for m in range(20, 35)) == SUPPORTED
    assert set(CHECKED) == {"0.20", "0.33", "0.34"} and set(CHECKED) <= set(SUPPORTED)
    assert {c.since for c in CHANGES} <= set(SUPPORTED)


@pytest.mark.parametrize("version", SUPPORTED)
def test_a_release_has_exactly_the_changes_it_has_reached(version: str) -> None:
    features = release_features(version)
    have = {c.flag for c in CHANGES if getattr(features, c.flag)}
    assert have == {c.flag for c in CHANGES if version_key(c.since) <= version_key(version)}
    # Cumulative: a release has everything the one before it had.
    index = SUPPORTED.index(version)
    if index:
        before = release_features(SUPPORTED[index - 1])
        assert {c.flag for c in CHANGES if getattr(before, c.flag)} <= have


def test_the_cumulative_sets_of_some_releases_in_between() -> None:
    def flags(version: str) -> set[str]:
        f = release_features(version)
        return {c.flag for c in CHANGES if getattr(f, c.flag)}

    assert flags("0.20") == flags("0.21") == flags("0.22") == set()
    assert flags("0.23") == {"batch_queue_waits_while_requests"}
    # 0.24, not 0.28, reuses unhashed freed blocks first: the release matrix found it
    # (vLLM 0.24 .. 0.27 differed from the engine on prefix-heavy traces).
    assert flags("0.24") == flags("0.23") | {
        "watermark",
        "throttle_prefills",
        "unhashed_blocks_reused_first",
    }
    assert flags("0.27") == flags("0.24") | {
        "spec_pads_new_decodes",
        "in_flight_caching",
        "partial_prefill_knobs_removed",
        "prefix_stats_at_admission",
        "stale_output_after_preemption",
        "threshold_within_max_model_len",
    }
    assert flags("0.29") == flags("0.28") == flags("0.27") | {"preemption_rewinds_by_position"}
    # The padding's 0.30 form: found by the release matrix (vLLM 0.28 ran a fully cached
    # resume unpadded when nothing was running).
    assert flags("0.30") == flags("0.29") | {"spec_pads_resumed_decodes"}
    assert (
        flags("0.32")
        == flags("0.31")
        == flags("0.30")
        | {
            "lone_request_uncapped",
            "max_num_active_seqs",
            "long_prefill_token_threshold_adaptive",
        }
    )
    assert flags("0.33") == {c.flag for c in CHANGES if c.since != "0.34"}
    assert flags("0.34") == {c.flag for c in CHANGES}


@pytest.mark.parametrize(("knob", "value"), [("watermark", 0.1), ("max_num_active_seqs", 2)])
def test_a_knob_is_refused_before_its_release_and_taken_from_it(knob: str, value: object) -> None:
    since = KNOB_SINCE[knob]
    before = SUPPORTED[SUPPORTED.index(since) - 1]
    assert not knob_available(knob, before) and knob_available(knob, since)
    refusal = f"{knob}: vLLM {before} has no {knob} \\(added in {since}\\)"
    with pytest.raises(ConfigError, match=refusal):
        make_config(vllm_version=before, **{knob: value}).validate()  # type: ignore[arg-type]
    for version in SUPPORTED[SUPPORTED.index(since) :]:
        config = make_config(vllm_version=version, **{knob: value})  # type: ignore[arg-type]
        assert getattr(config.validate().scheduler, knob) == value


@pytest.mark.parametrize(
    ("knob", "value"),
    [
        ("max_num_active_seqs", 2),
        ("watermark", 0.1),
        ("prefill_schedule_interval", 2),
        ("long_prefill_token_threshold_adaptive", True),
    ],
)
def test_later_knobs_are_refused_on_releases_without_them(knob: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"{knob}: vLLM 0.20 has no {knob} \\(added in 0\\."):
        make_config(vllm_version="0.20", **{knob: value}).validate()  # type: ignore[arg-type]
    make_config(vllm_version="0.33", **{knob: value}).validate()  # type: ignore[arg-type]
    with pytest.raises(ScenarioError, match=f"config.{knob}"):
        parse_scenario(
            {
                "config": {"vllm_version": "0.20", knob: value},
                "requests": [{"id": "a", "prompt_len": 1, "max_tokens": 1}],
            }
        )


def test_validation_of_0_33() -> None:
    cfg = SchedulerConfig(max_model_len=64, long_prefill_token_threshold=100)
    EngineConfig(scheduler=cfg, vllm_version="0.20").validate()
    with pytest.raises(ConfigError, match="cannot be greater than max_model_len"):
        EngineConfig(scheduler=cfg, vllm_version="0.33").validate()
    # vLLM accepts a threshold that cuts a padded decode (it fails only if a run pads one:
    # tests/engine/test_faults.py), so it is accepted here too.
    make_config(num_speculative_tokens=3, long_prefill_token_threshold=2).validate()
    make_config(num_speculative_tokens=3, long_prefill_token_threshold=4).validate()
    with pytest.raises(ConfigError, match="max_num_active_seqs"):
        make_config(max_num_seqs=4, max_num_active_seqs=5).validate()
    with pytest.raises(ConfigError, match="watermark"):
        make_config(watermark=1.0).validate()


def test_the_release_cannot_change_while_running() -> None:
    s = make_scheduler(vllm_version="0.20")
    with pytest.raises(ValueError, match="vllm_version cannot change"):
        s.update_config(s.config.with_updates(vllm_version="0.33"))


@pytest.mark.parametrize(("version", "chunk"), [("0.20", 4), ("0.33", 10)])
def test_a_lone_request_is_not_capped_by_the_threshold_since_0_31(version: str, chunk: int) -> None:
    s = make_scheduler(
        long_prefill_token_threshold=4, max_num_batched_tokens=16, vllm_version=version
    )
    make_request(s, "A", 10)
    assert scheduled(step(s)) == {"A": chunk}
    s = make_scheduler(
        long_prefill_token_threshold=4, max_num_batched_tokens=16, vllm_version=version
    )
    make_request(s, "A", 10)
    make_request(s, "B", 10)  # two requests: the cap applies
    assert scheduled(step(s)) == {"A": 4, "B": 4}


@pytest.mark.parametrize(("version", "plan"), [("0.33", {"A": 4, "B": 4}), ("0.34", {"A": 10})])
def test_without_chunked_prefill_the_threshold_caps_nothing_since_0_34(
    version: str, plan: dict[str, int]
) -> None:
    s = make_scheduler(
        long_prefill_token_threshold=4,
        max_num_batched_tokens=16,
        max_model_len=16,
        enable_chunked_prefill=False,
        vllm_version=version,
    )
    make_request(s, "A", 10)
    make_request(s, "B", 10)
    # 0.33 cut each prompt to 4 even with chunking off; 0.34 admits A whole, and B's
    # whole prompt no longer fits the 6 tokens left.
    assert scheduled(step(s)) == plan


def test_adaptive_threshold_floors_at_a_fair_share() -> None:
    s = make_scheduler(
        long_prefill_token_threshold=2,
        long_prefill_token_threshold_adaptive=True,
        max_num_batched_tokens=12,
    )
    for name in "ABC":
        make_request(s, name, 10)
    assert scheduled(step(s)) == {"A": 4, "B": 4, "C": 4}  # 12 // 3 > 2


@pytest.mark.parametrize(("version", "step3"), [("0.20", {}), ("0.33", {"A": 1, "C": 1})])
def test_priority_self_preemption_ends_the_running_scan_only_before_0_33(
    version: str, step3: dict[str, int]
) -> None:
    s = make_scheduler(policy="priority", block_size=2, num_gpu_blocks=5, vllm_version=version)
    make_request(s, "B", 2, max_tokens=6, priority=5)
    step(s)
    make_request(s, "A", 1, max_tokens=6)
    make_request(s, "C", 1, max_tokens=6)
    step(s)
    step(s)
    out = step(s)  # B needs a block, none is free: B (lowest priority) preempts itself
    assert out.preempted_req_ids == ("B",)
    assert scheduled(out) == step3


@pytest.mark.parametrize(("version", "n", "drafts"), [("0.20", 1, ()), ("0.33", 3, (-1, -1))])
def test_a_new_decode_is_padded_to_1_plus_k_under_speculative_decoding(
    version: str, n: int, drafts: tuple[int, ...]
) -> None:
    s = make_scheduler(num_speculative_tokens=2, vllm_version=version)
    make_request(s, "R", 3, max_tokens=8)
    step(s)
    make_request(s, "N", 1, max_tokens=8)
    out = step(s)
    chunk = next(c for c in out.chunks if c.req_id == "N")
    assert (chunk.num_tokens, chunk.spec_token_ids) == (n, drafts)
    assert s.requests["N"].num_computed_tokens == 1  # placeholder drafts are rejected


def test_max_num_active_seqs_caps_admission_with_its_own_reason() -> None:
    s = make_scheduler(max_num_seqs=4, max_num_active_seqs=2)
    for name in "ABC":
        make_request(s, name, 4)
    out = step(s)
    assert set(scheduled(out)) == {"A", "B"}
    assert reasons(s, out) == {"C": "max_num_active_seqs"}
    d = out.waiting_detail
    assert (d["max_num_active_seqs"], d["num_running"], d["max_num_seqs"]) == (2, 2, 4)
    text = waiting_text("C", "max_num_active_seqs", d)
    assert text == "waits: admission cap max_num_active_seqs 2 reached (2 running; max_num_seqs 4)"


def test_the_watermark_keeps_blocks_free_for_admissions_while_requests_run() -> None:
    s = make_scheduler(block_size=4, num_gpu_blocks=11, watermark=0.2)  # 2 blocks kept
    make_request(s, "A", 24, max_tokens=8)  # nothing runs yet: no watermark for A
    step(s)
    make_request(s, "B", 12)  # needs 3 blocks; 3 are free, but 2 must stay free
    out = step(s)
    assert "B" not in scheduled(out)
    assert reasons(s, out) == {"B": "kv_watermark"}
    d = out.waiting_detail
    assert (d["blocks_needed"], d["blocks_free"], d["watermark_blocks"]) == (3, 3, 2)
    assert waiting_text("B", "kv_watermark", d) == (
        "waits: KV watermark (3 blocks free, 2 kept free); B needs 3 blocks"
    )


def test_prefill_is_throttled_to_every_nth_executed_step_while_a_decode_runs() -> None:
    s = make_scheduler(prefill_schedule_interval=3)
    runner = SimRunner()

    def run(engine_step: int) -> SchedulerOutput:
        out = s.schedule(engine_step)
        s.update_from_output(out, runner.execute(out))
        return out

    make_request(s, "A", 4, max_tokens=8)
    run(0)  # A's prefill: executed step 1 carried prefill
    make_request(s, "B", 4)  # held while A decodes, for two executed steps
    for engine_step in (1, 2):
        out = run(engine_step)
        assert scheduled(out) == {"A": 1}
        assert reasons(s, out) == {"B": "prefill_throttled"}
        assert out.waiting_detail["until_step"] == 3
    assert scheduled(run(3)) == {"A": 1, "B": 4}
    text = waiting_text("B", "prefill_throttled", out.waiting_detail)
    assert text == "waits: prefill throttled until step 3 (prefill_schedule_interval 3)"


@pytest.mark.parametrize("version", SUPPORTED)
def test_prefix_cache_stats_count_lookups_or_admissions(version: str) -> None:
    s = make_scheduler(
        block_size=4, num_gpu_blocks=6, enable_prefix_caching=True, vllm_version=version
    )
    make_request(s, "A", 16, max_tokens=4)  # holds 4 of 5 blocks, then a 5th
    make_request(s, "B", list(range(500, 508)), max_tokens=1)  # waits for blocks
    queries = 0
    for _ in range(12):
        queries += step(s).prefix_cache_queries
    if not release_features(version).prefix_stats_at_admission:  # before 0.27
        assert queries > 16 + 8  # B's failed lookups count too
    else:
        assert queries == 16 + 8  # each request once, when admitted


@pytest.mark.parametrize(("version", "step14"), [("0.20", {"r1": 1}), ("0.33", {"r1": 1, "r4": 1})])
def test_preempting_an_unscheduled_request_before_the_current_one_skips_none_since_0_28(
    version: str, step14: dict[str, int]
) -> None:
    # Async, priority: at step 14 r12 (priority 3, first in RUNNING) is passed over (its
    # batch in flight reaches max_tokens), r1 finds no free block and preempts r12. 0.20
    # then skipped r4, the request after r1. (Both results equal vLLM's own, 0.20.0 and
    # 0.33.0, through tools/compare_scenario.py.)
    data = {
        "config": {
            "vllm_version": version,
            "max_num_batched_tokens": 63,
            "max_num_seqs": 3,
            "block_size": 1,
            "num_gpu_blocks": 19,
            "enable_prefix_caching": False,
            "policy": "priority",
            "async_scheduling": True,
        },
        "requests": [
            {"id": "r1", "arrival_step": 11, "max_tokens": 4, "prompt_len": 5},
            {"id": "r4", "arrival_step": 11, "max_tokens": 4, "prompt_len": 1},
            {
                "id": "r12",
                "arrival_step": 10,
                "max_tokens": 4,
                "priority": 3,
                "prompt_token_ids": [20001, 138, 175, 212, 249],
            },
        ],
    }
    steps = run_scenario(parse_scenario(data))["steps"]
    assert steps[14]["preempted_req_ids"] == ["r12"]
    assert steps[14]["scheduled"] == step14


@pytest.mark.parametrize("version", CHECKED)
def test_a_padded_resume_larger_than_the_pool_never_runs_on_0_33(version: str) -> None:
    # One request, K = 6 drafts, 19 usable blocks of 1 token: its drafts run out of blocks,
    # it preempts itself; under 0.33 the blocks cached after each output make its resume a
    # full prefix hit, so it is padded to 1 + 6 tokens and needs 21 slots: it never runs
    # again (vLLM 0.33.0 stalls the same way). 0.20 resumes it and it finishes.
    data = {
        "config": {
            "vllm_version": version,
            "max_num_batched_tokens": 131,
            "max_num_seqs": 1,
            "block_size": 1,
            "num_gpu_blocks": 20,
            "enable_chunked_prefill": False,
            "enable_prefix_caching": True,
            "scheduler_reserve_full_isl": False,
            "num_speculative_tokens": 6,
            "max_model_len": 128,
            "max_steps": 50,
        },
        "requests": [{"id": "r6", "max_tokens": 6, "prompt_len": 10}],
    }
    result = run_scenario(parse_scenario(data))
    if version == "0.20":
        assert result["requests"]["r6"]["finish_step"] == 5
    else:
        assert result["num_steps"] == 50 and result["completed"] == 0
        last = result["steps"][-1]
        assert last["waiting_reasons"] == {"r6": "kv_blocks"}
