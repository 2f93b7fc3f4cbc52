"""The live dashboard in a real headless Chromium against a real server (issue 4)."""

from __future__ import annotations

import re
from typing import Any

from tests.browser.harness import SEED_PLANS, Console, Server

# The browser's request rows, open segments closed at the current step like a snapshot.
CLIENT_ROWS_JS = """() => batchscope.model.order.map(id => {
    const r = batchscope.model.reqs.get(id);
    const end = s => (s[2] === null ? Math.max(batchscope.model.step, s[1]) : s[2]);
    return {req: r.req, status: r.status, num_computed_tokens: r.num_computed_tokens,
            num_preemptions: r.num_preemptions, finish_step: r.finish_step,
            waiting_reason: r.waiting_reason,
            segments: r.segs.map(s => [s[0], s[1], end(s), s[3]])};
})"""


def model_step(page: Any) -> int:
    return int(page.evaluate("() => batchscope.model.step"))


def step_rows(page: Any) -> list[dict[str, Any]]:
    return list(
        page.evaluate(
            "() => batchscope.model.steps.items.map(s => ({step: s.step, total: s.total}))"
        )
    )


def test_dashboard_loads_without_console_errors(page: Any, console: Console) -> None:
    page.wait_for_selector("#conn-state[data-state=live]")
    page.wait_for_function("() => document.getElementById('gantt').dataset.shownAt")
    page.wait_for_function("() => document.querySelector('#charts .main-svg') !== null")
    page.wait_for_timeout(500)
    assert page.locator("#steps-table").count() == 1
    assert page.locator("#btn-inject").is_enabled()  # the launch cookie grants control
    assert console.errors == []
    assert console.foreign == []


def test_gantt_rows_appear(page: Any, server: Server, console: Console) -> None:
    resp = server.api(
        "POST", "/api/requests", json={"prompt_len": 48, "max_tokens": 16, "count": 5}
    )
    assert resp.status_code == 201, resp.text
    ids = resp.json()["req_ids"]
    page.wait_for_function("() => document.getElementById('gantt').dataset.drawn === '5'")
    assert set(page.evaluate("() => batchscope.timeline.view.last.ids")) == set(ids)
    page.wait_for_function("() => document.querySelectorAll('#steps-table tbody tr').length > 0")
    assert console.errors == []


def test_injecting_through_the_form_adds_its_row(page: Any, console: Console) -> None:
    page.fill("#inj-len", "40")
    page.fill("#inj-max", "12")
    page.click("#btn-inject")
    flash = page.locator("#flash .flash-ok")
    flash.wait_for()
    match = re.search(r"queued (\S+)", flash.inner_text())
    assert match, flash.inner_text()
    req_id = match.group(1)
    page.wait_for_function("id => batchscope.model.reqs.has(id)", arg=req_id)
    page.wait_for_function("id => batchscope.timeline.view.last.ids.includes(id)", arg=req_id)
    page.locator(f'#requests-table tr[data-req="{req_id}"]').wait_for(timeout=10_000)
    assert console.errors == []


def test_budget_change_adds_a_marker_and_later_steps_respect_it(
    page: Any, server: Server, console: Console
) -> None:
    resp = server.api(
        "POST", "/api/requests", json={"prompt_len": 300, "max_tokens": 700, "count": 12}
    )
    assert resp.status_code == 201, resp.text
    page.wait_for_function("() => batchscope.model.steps.items.some(s => s.total > 32)")
    # Pause so the change lands while work remains (the sim engine is fast), then resume.
    page.click("#btn-pause")
    page.wait_for_selector("#run-state[data-state=paused]")
    page.fill("#cfg-mnbt", "32")
    page.click("#btn-config")
    page.locator("#flash .flash-ok", has_text="max_num_batched_tokens=32").wait_for()
    page.click("#btn-resume")
    marker = page.locator("#config-markers li").first
    marker.wait_for()
    label = marker.inner_text()
    assert re.fullmatch(r"max_num_batched_tokens=32 @ step \d+", label), label
    at = int(marker.get_attribute("data-step"))
    page.wait_for_function("at => batchscope.model.step >= at + 5", arg=at)
    page.wait_for_function("() => batchscope.timeline.view.last.markers.length === 1")
    after = [r for r in step_rows(page) if r["step"] >= at]
    assert after and all(r["total"] <= 32 for r in after), after
    assert page.evaluate("() => batchscope.model.config.max_num_batched_tokens") == 32
    assert console.errors == []


def test_pause_then_single_step_advances_exactly_one_step(
    page: Any, server: Server, console: Console
) -> None:
    resp = server.api(
        "POST", "/api/requests", json={"prompt_len": 64, "max_tokens": 500, "count": 4}
    )
    assert resp.status_code == 201, resp.text
    page.wait_for_function("() => batchscope.model.step >= 3")
    page.click("#btn-pause")
    page.wait_for_selector("#run-state[data-state=paused]")
    # More work while paused, so a step has something to do even if the first batch ended.
    assert (
        server.api("POST", "/api/requests", json={"prompt_len": 16, "max_tokens": 50}).status_code
        == 201
    )
    before = model_step(page)
    page.wait_for_timeout(600)
    assert model_step(page) == before  # paused: no steps
    page.click("#btn-step")
    page.wait_for_function("s => batchscope.model.step === s + 1", arg=before)
    page.wait_for_timeout(800)
    assert model_step(page) == before + 1
    last = page.locator("#steps-table tbody tr").last
    assert last.get_attribute("data-step") == str(before + 1)
    assert page.locator("#run-state").inner_text() == "paused"
    assert console.errors == []


def test_loading_the_seed_scenario_shows_the_article_table(page: Any, console: Console) -> None:
    page.click('#scenarios li[data-scenario="seed"] button')
    page.wait_for_function(
        "() => document.querySelectorAll('#steps-table tbody tr').length === 5 "
        "&& document.querySelector('#steps-table .total-tokens').textContent === '19'"
    )
    page.wait_for_timeout(300)
    plans = page.locator("#steps-table tbody td.plan").all_inner_texts()
    assert plans == SEED_PLANS
    steps = page.locator("#steps-table tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.step)"
    )
    assert steps == ["0", "1", "2", "3", "4"]
    assert page.locator("#steps-table .total-tokens").inner_text() == "19"
    assert page.locator("#hdr-name").inner_text() == "seed"
    # The controls panel follows the session: a scenario has no Poisson workload.
    page.wait_for_function("() => !document.getElementById('workload-form')")
    assert console.errors == []


def test_the_client_fold_of_frames_matches_the_server_snapshot(
    page: Any, server: Server, console: Console
) -> None:
    """live.js/model.js mirror app/frames/fold.py: after waiting, chunked prefill, decode runs
    and preemptions, the browser's picture equals a fresh server snapshot."""
    assert server.api("POST", "/api/config", json={"kv_block_limit": 40}).status_code == 200
    resp = server.api(
        "POST", "/api/requests", json={"prompt_len": 200, "max_tokens": 300, "count": 10}
    )
    assert resp.status_code == 201, resp.text
    page.wait_for_function(
        "() => batchscope.model.order.some(id => batchscope.model.reqs.get(id).num_preemptions)"
    )
    page.click("#btn-pause")
    page.wait_for_selector("#run-state[data-state=paused]")
    snap = server.api("GET", "/api/state").json()
    client = page.evaluate(CLIENT_ROWS_JS)
    assert page.evaluate("() => batchscope.model.step") == snap["step"]
    keys = (
        "req", "status", "num_computed_tokens", "num_preemptions", "finish_step",
        "waiting_reason", "segments",
    )  # fmt: skip
    server_rows = [{k: r[k] for k in keys} for r in snap["requests"]]
    assert client == server_rows
    # (the frames carried compact waiting reasons, resolved on both sides)
    assert any(r["waiting_reason"] for r in server_rows)
    blocks = page.evaluate(
        "() => batchscope.model.blocks.map((b, id) => b && [id, ...b]).filter(Boolean)"
    )
    assert blocks == snap["blocks"]
    assert console.errors == []
