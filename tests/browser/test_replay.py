"""Recordings in the browser (issue 5): the sessions page, replay in the dashboard page with
its scrubber, inline rename, re-run under other knobs and the compare page.

One server and one recorded seed session serve the whole module (the steps build on each
other: rename, then re-run, then compare and delete), which keeps the added time small.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.harness import (
    SEED_PLANS,
    Console,
    Server,
    load_seed_recording,
    start_server,
    stop_process,
)

HOSTILE = '<img src=x onerror="window.pwned=1">&amp; "seed"'
PLANS_JS = "() => Array.from(document.querySelectorAll('#steps-table td.plan'), e => e.textContent)"


@pytest.fixture(scope="module")
def rec_server(tmp_path_factory: pytest.TempPathFactory, migrated_db: Path) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("replay"), migrated=migrated_db)
    try:
        yield srv
    finally:
        stop_process(srv.proc)


@pytest.fixture(scope="module")
def seed_id(rec_server: Server) -> str:
    return load_seed_recording(rec_server, 20)


@pytest.fixture(scope="module")
def context(browser: Any, rec_server: Server) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1500, "height": 1000})
    ctx.new_page().goto(rec_server.url + f"/launch?token={rec_server.token}")
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.fixture
def rpage(context: Any, rec_server: Server, console: Console) -> Iterator[Any]:
    pg = console.watch(context.new_page(), rec_server.url)
    pg.on("dialog", lambda d: d.accept())
    try:
        yield pg
    finally:
        pg.close()


def seek(page: Any, step: int) -> None:
    page.evaluate(
        "k => { const s = document.getElementById('rp-scrub'); s.value = String(k);"
        " s.dispatchEvent(new Event('change')); }",
        step,
    )


def test_a_session_row_opens_its_replay_and_the_scrubber_drives_it(
    rpage: Any, rec_server: Server, seed_id: str, console: Console
) -> None:
    rpage.goto(rec_server.url + "/sessions")
    row = rpage.locator(f'#sessions-rows tr[data-session="{seed_id}"]')
    row.wait_for()
    assert row.locator(".name-text").inner_text() == "seed"
    assert row.locator("td.num").first.inner_text() == "5"
    row.locator("a.replay").click()
    rpage.wait_for_url(f"**/?session={seed_id}")
    rpage.wait_for_function("() => batchscope.conn.snapshots > 0 && batchscope.model.step === 4")
    # Same page as live: only the replay badge and the scrubber tell them apart.
    assert rpage.locator("#conn-state").inner_text() == "replay"
    for live_only in ("#controls", "#config-form", "#scenarios", "#run-state"):
        assert rpage.locator(live_only).count() == 0, live_only
    assert rpage.get_attribute("#rp-scrub", "max") == "4"
    assert rpage.locator("#rp-steps").inner_text() == "5 steps"
    export = rpage.get_attribute("#export-perfetto", "href")
    assert export == f"/api/sessions/{seed_id}/export?format=perfetto"

    seek(rpage, 1)
    rpage.wait_for_function(
        "() => batchscope.model.step === 1 && document.querySelectorAll('#steps-table tbody tr')"
        ".length === 2"
    )
    assert rpage.evaluate(PLANS_JS) == ["{A:4, B:2}", "{A:1, B:4, C:1}"]
    assert rpage.locator("#rp-step").inner_text() == "1"
    # The htmx panels follow the step on screen: at step 1, A has finished, B and C not.
    rpage.locator('#requests-table tr[data-req="B"][data-status="running"]').wait_for()
    assert rpage.get_attribute('#requests-table tr[data-req="A"]', "data-status") == "finished"

    rpage.click("#rp-play")
    rpage.wait_for_function(
        "() => batchscope.model.step === 4 && document.querySelectorAll('#steps-table tbody tr')"
        ".length === 5"
    )
    assert rpage.evaluate(PLANS_JS) == SEED_PLANS
    assert rpage.locator("#steps-table .total-tokens").inner_text() == "19"
    rpage.wait_for_function("() => document.getElementById('rp-play').textContent === 'Play'")
    rpage.wait_for_function("() => document.getElementById('gantt').dataset.drawn === '3'")

    # The step table renders at most ~25 times a second: wait for its rows, not only the model.
    rpage.click("#rp-back")
    rpage.wait_for_function(
        "() => batchscope.model.step === 3 && document.querySelectorAll('#steps-table tbody tr')"
        ".length === 4"
    )
    assert rpage.evaluate(PLANS_JS) == SEED_PLANS[:4]
    rpage.click("#rp-fwd")
    rpage.wait_for_function(
        "() => batchscope.model.step === 4 && document.querySelectorAll('#steps-table tbody tr')"
        ".length === 5"
    )
    assert rpage.evaluate(PLANS_JS) == SEED_PLANS
    assert console.errors == []
    assert console.foreign == []


def test_inline_rename_and_filter_keep_user_text_as_text(
    rpage: Any, rec_server: Server, seed_id: str, console: Console
) -> None:
    rpage.goto(rec_server.url + "/sessions")
    row = rpage.locator(f'#sessions-rows tr[data-session="{seed_id}"]')
    row.locator("button.rename").click()
    row.locator(".rename-form input").fill(HOSTILE)
    row.locator(".rename-form button[type=submit]").click()
    rpage.locator("#flash .flash-ok").wait_for()
    assert row.locator(".name-text").inner_text() == HOSTILE
    assert rec_server.api("GET", f"/api/sessions/{seed_id}").json()["name"] == HOSTILE

    rpage.reload()  # now rendered by the server
    assert row.locator(".name-text").inner_text() == HOSTILE
    rpage.fill("#sessions-q", "onerror")
    rpage.wait_for_function("() => document.querySelectorAll('#sessions-rows tr').length === 1")
    assert row.locator(".name-text").inner_text() == HOSTILE
    rpage.fill("#sessions-q", "no-such-session")
    rpage.locator("#sessions-rows td.hint").wait_for()
    assert rpage.locator("img").count() == 0
    assert rpage.evaluate("() => window.pwned") is None
    assert console.errors == []


def test_rerun_with_other_knobs_opens_the_compare_page(
    rpage: Any, rec_server: Server, seed_id: str, console: Console
) -> None:
    rpage.goto(rec_server.url + f"/?session={seed_id}")
    rpage.wait_for_function("() => batchscope.conn.snapshots > 0")
    rpage.fill("#rr-long_prefill_token_threshold", "0")
    rpage.click("#btn-rerun")
    rpage.wait_for_url("**/compare?a=*&b=*")
    rpage.wait_for_function("() => document.body.dataset.drawn === 'yes'")
    other = rpage.get_attribute("#gantt-b", "data-session")
    assert rpage.get_attribute("#gantt-a", "data-session") == seed_id and other != seed_id
    for side in ("a", "b"):
        assert rpage.get_attribute(f"#gantt-{side}", "data-rows") == "3"
        assert rpage.get_attribute(f"#gantt-{side}", "data-drawn") == "3"
    metrics = rpage.locator("#compare-table tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.metric)"
    )
    assert {"throughput_tok_s", "ttft_p99", "itl_p50", "e2e_p99", "preemptions"} <= set(metrics)
    assert {"kv_peak", "steps", "finished"} <= set(metrics)
    differs = rpage.locator("#config-table tr.differs").evaluate_all(
        "rows => rows.map(r => r.dataset.knob)"
    )
    assert differs == ["long_prefill_token_threshold"]
    assert rpage.locator("#side-a .side-name").inner_text() == HOSTILE  # still text
    assert rpage.locator("img").count() == 0

    # The same comparison from the sessions page: tick both rows, Compare; then delete.
    rpage.goto(rec_server.url + "/sessions")
    for sid in (seed_id, other):
        rpage.check(f'#sessions-rows tr[data-session="{sid}"] input.pick')
    rpage.click("#btn-compare")
    rpage.wait_for_url("**/compare?a=*&b=*")
    rpage.locator("#config-table tr.differs").wait_for()
    rpage.goto(rec_server.url + "/sessions")
    rpage.click(f'#sessions-rows tr[data-session="{other}"] button.delete')  # confirm accepted
    rpage.locator(f'#sessions-rows tr[data-session="{other}"]').wait_for(state="detached")
    assert rec_server.api("GET", f"/api/sessions/{other}").status_code == 404
    assert console.errors == []
