"""Scenario files and `batchscope simulate`: the seed table and clear errors."""

from __future__ import annotations

import dataclasses
import gc
import json
from pathlib import Path

import pytest

from engine.events import Event, ListSink
from engine.scenario import ScenarioError, load_scenario, parse_scenario, prompt_tokens
from engine.simulate import run_scenario
from tests.conftest import cli

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "scenarios" / "seed.json"


def test_seed_scenario_reproduces_the_article_table() -> None:
    result = run_scenario(load_scenario(SEED))
    plan = [s["scheduled"] for s in result["steps"]]
    assert plan == [
        {"A": 4, "B": 2},
        {"A": 1, "B": 4, "C": 1},
        {"B": 2, "C": 2},
        {"B": 1, "C": 1},
        {"B": 1},
    ]
    assert result["total_scheduled_tokens"] == 19
    assert [list(p) for p in plan] == [["A", "B"], ["A", "B", "C"], ["B", "C"], ["B", "C"], ["B"]]
    assert result["requests"]["C"]["first_scheduled_step"] == 1
    assert result["requests"]["A"]["finish_step"] == 1


def test_seed_without_the_threshold() -> None:
    scenario = load_scenario(SEED)
    scenario = dataclasses.replace(
        scenario, config=scenario.config.with_updates(long_prefill_token_threshold=0)
    )
    plan = [s["scheduled"] for s in run_scenario(scenario)["steps"]]
    assert plan == [
        {"A": 4, "B": 2},
        {"A": 1, "B": 5},
        {"B": 1, "C": 3},
        {"B": 1, "C": 1},
        {"B": 1},
    ]


class _CollectorWatch(ListSink):
    """Keeps the events and whether counted collections were on at each."""

    def __init__(self) -> None:
        super().__init__()
        self.collector_on: list[bool] = []

    def emit(self, event: Event) -> None:
        super().emit(event)
        self.collector_on.append(gc.isenabled())


def test_a_run_collects_on_its_clock_and_gives_the_collector_back() -> None:
    """The scheduler's queue is not walked by counted collections while a run steps
    (engine.gc_clock); after the run, counted collections are on again, and the run
    decides as before."""
    assert gc.isenabled()
    watch = _CollectorWatch()
    result = run_scenario(load_scenario(SEED), sink=watch)
    assert watch.collector_on and not any(watch.collector_on)
    assert gc.isenabled()
    assert result["steps"][0]["scheduled"] == {"A": 4, "B": 2}


def test_deterministic_prompt_and_output_tokens() -> None:
    assert prompt_tokens(2, 4) == [
        20002,
        100 + (37 + 2) % 9000,
        100 + (74 + 2) % 9000,
        100 + (111 + 2) % 9000,
    ]
    result = run_scenario(load_scenario(SEED))
    a = result["requests"]["A"]["output_token_ids"]
    # A's prompt ends with token t at position 3; its first output is at position 4.
    last = prompt_tokens(0, 4)[-1]
    first = 1 + (31 * last + 17 * 4) % 31999
    assert a == [first, 1 + (31 * first + 17 * 5) % 31999]


def test_empty_steps_between_arrivals_are_recorded() -> None:
    data = {
        "config": {"max_num_batched_tokens": 8, "max_num_seqs": 2},
        "requests": [{"id": "x", "arrival_step": 3, "prompt_len": 2, "max_tokens": 1}],
    }
    result = run_scenario(parse_scenario(data))
    assert [s["scheduled"] for s in result["steps"]] == [{}, {}, {}, {"x": 2}]


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda d: d["requests"][2].update(prompt_len=0), "requests[2].prompt_len: must be > 0"),
        (lambda d: d["requests"][0].pop("max_tokens"), "requests[0].max_tokens: required"),
        (lambda d: d["config"].update(policy="lifo"), "config.policy"),
        (lambda d: d["config"].update(max_num_seqs=99), "config.max_num_batched_tokens"),
        (lambda d: d["config"].update(bogus=1), "config.bogus: unknown config key"),
        (lambda d: d["requests"].append(dict(d["requests"][0])), "requests[3].id: duplicate"),
    ],
)
def test_malformed_scenarios_name_the_field(mutate, where) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(SEED.read_text())
    mutate(data)
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    assert str(info.value).startswith(where)


def test_cli_simulate_writes_the_result_and_prints_the_table(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = cli("simulate", str(SEED), "--out", str(out), "--table")
    assert proc.returncode == 0, proc.stderr
    assert "total scheduled tokens: 19" in proc.stdout
    result = json.loads(out.read_text())
    assert result["num_steps"] == 5 and result["completed"] == 3
    keys = {
        "step",
        "arrived",
        "scheduled",
        "new_req_ids",
        "resumed_req_ids",
        "preempted_req_ids",
        "prefix_cache_hit_tokens",
        "num_running",
        "num_waiting",
        "kv_blocks_used",
        "sampled_req_ids",
        "finished_req_ids",
        "num_running_end",
        "num_waiting_end",
        "kv_blocks_used_end",
    }
    assert keys <= set(result["steps"][0])
    assert {"median_step_us", "p90_step_us"} == set(result["timing"])


def test_cli_bad_file_exits_2_with_one_clear_message(tmp_path: Path) -> None:
    data = json.loads(SEED.read_text())
    data["requests"][1]["prompt_len"] = -3
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    proc = cli("simulate", str(bad))
    assert proc.returncode == 2
    assert proc.stderr.strip() == "batchscope: error: requests[1].prompt_len: must be > 0"
    missing = cli("simulate", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and "cannot read file" in missing.stderr
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert cli("simulate", str(broken)).returncode == 2
