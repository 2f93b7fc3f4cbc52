"""The first-difference walk and its attribution on real engine runs of shipped
scenarios (no server): alike runs, a run that ends first, and each release pair's
explaining change found by reverting the changes one at a time."""

from __future__ import annotations

from app.nodes.scenarios import load_named_scenario
from app.records.first_difference import explain, scenario_run, walk


def test_alike_runs_and_a_run_that_ends_first() -> None:
    scenario = load_named_scenario("seed")
    run = scenario_run(scenario)
    full = run(scenario.config, None, scenario.max_steps)
    same = walk(full, run(scenario.config, None, scenario.max_steps))
    assert same.step is None and same.compared == len(full)
    short = walk(full, full[:3])
    assert short.step == 3 and short.fields == ["steps"]
    assert len(full) == 5  # the article's table: steps 0 .. 4
    assert [r["step"] for r in short.rows["a"]] == [0, 1, 2, 3, 4]
    assert [r["step"] for r in short.rows["b"]] == [0, 1, 2, None, None]


def test_each_pair_is_explained_by_its_change_alone() -> None:
    for name, step, flag in (
        ("priority", 25, "priority_self_preemption_continues"),
        ("async_placeholders", 0, "lone_request_uncapped"),
    ):
        scenario = load_named_scenario(name)
        run = scenario_run(scenario)
        old = scenario.config.with_updates(vllm_version="0.20")
        new = scenario.config.with_updates(vllm_version="0.33")
        walked = walk(run(old, None, scenario.max_steps), run(new, None, scenario.max_steps))
        assert walked.step == step, name
        explained = explain(run, old, new, step, walked)
        assert explained is not None
        assert [f for f, yes in explained.items() if yes] == [flag], name
        # Either side may be the newer one.
        again = walk(run(new, None, scenario.max_steps), run(old, None, scenario.max_steps))
        explained = explain(run, new, old, step, again)
        assert explained is not None and [f for f, y in explained.items() if y] == [flag]
