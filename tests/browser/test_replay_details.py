"""What a user reads on a replayed recording (issue 31, item 5), in Chromium at 1280 × 800:
the request count follows the seek on screen, the ITL column shows the recording's ITL, a
negative step in the URL opens the first step, and the Mooncake export is a trace.

One server and one recorded seed session (scenarios/seed.json) serve the module.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.mooncake import parse_trace
from tests.browser.harness import Console, Server, load_seed_recording, start_server, stop_process

VIEWPORT = {"width": 1280, "height": 800}
COUNT_JS = "() => document.getElementById('req-count').textContent"


@pytest.fixture(scope="module")
def rec_server(tmp_path_factory: pytest.TempPathFactory, migrated_db: Path) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("details"), migrated=migrated_db)
    try:
        yield srv
    finally:
        stop_process(srv.proc)


@pytest.fixture(scope="module")
def seed_id(rec_server: Server) -> str:
    return load_seed_recording(rec_server, 30)


@pytest.fixture
def rpage(browser: Any, rec_server: Server, console: Console) -> Iterator[Any]:
    ctx = browser.new_context(viewport=VIEWPORT, accept_downloads=True)
    try:
        yield console.watch(ctx.new_page(), rec_server.url)
    finally:
        ctx.close()


def open_replay(page: Any, server: Server, sid: str, query: str = "") -> None:
    page.goto(server.url + f"/?session={sid}{query}")
    page.wait_for_function("() => batchscope.conn.snapshots > 0")


def seek(page: Any, step: int) -> None:
    page.evaluate(
        "k => { const s = document.getElementById('rp-scrub'); s.value = String(k);"
        " s.dispatchEvent(new Event('change')); }",
        step,
    )


def rows_at(server: Server, sid: str, **params: Any) -> tuple[int, list[dict[str, Any]]]:
    resp = server.api("GET", f"/api/sessions/{sid}/requests", params=params)
    assert resp.status_code == 200, resp.text
    return int(resp.headers["x-total-count"]), resp.json()


def test_the_request_count_is_the_seek_on_screens(
    rpage: Any, rec_server: Server, seed_id: str, console: Console
) -> None:
    """After a seek, "N requests match" is the count at the new step, not the last one."""
    at_end, _ = rows_at(rec_server, seed_id, step=4, status="finished")
    at_one, _ = rows_at(rec_server, seed_id, step=1, status="finished")
    assert (at_end, at_one) == (3, 1)
    open_replay(rpage, rec_server, seed_id)
    rpage.select_option('#req-filters [name="status"]', "finished")
    rpage.wait_for_function(f"() => ({COUNT_JS})() === '{at_end} requests match'")
    seek(rpage, 1)
    rpage.wait_for_function("() => batchscope.model.step === 1")
    rpage.locator('#requests-table tr[data-req="A"][data-status="finished"]').wait_for()
    rpage.wait_for_function("() => document.getElementById('requests-table').dataset.total === '1'")
    rpage.wait_for_function(f"() => ({COUNT_JS})() === '{at_one} requests match'", timeout=5000)
    seek(rpage, 4)
    rpage.wait_for_function(f"() => ({COUNT_JS})() === '{at_end} requests match'", timeout=5000)
    assert console.errors == []


def test_the_itl_column_shows_the_recordings_itl(
    rpage: Any, rec_server: Server, seed_id: str, console: Console
) -> None:
    _, rows = rows_at(rec_server, seed_id, step=4)
    itl = {r["req"]: r["itl"] for r in rows}
    assert all(v is not None and v > 0 for v in itl.values()), itl
    open_replay(rpage, rec_server, seed_id)
    for req, seconds in itl.items():
        cell = rpage.locator(f'#requests-table tr[data-req="{req}"] td').nth(8)
        cell.wait_for()
        # The table's own format (request_table.js ms()): seconds under 1 as ms.
        want = f"{seconds * 1000:.1f} ms" if seconds * 1000 < 1000 else None
        assert cell.inner_text() != "–", req
        if want is not None:
            assert cell.inner_text() == want, (req, seconds)
    head = rpage.locator("#requests-head th").nth(8).inner_text()
    assert head == "ITL"
    assert console.errors == []


def test_a_negative_step_in_the_url_opens_the_first_step(
    rpage: Any, rec_server: Server, seed_id: str, console: Console
) -> None:
    open_replay(rpage, rec_server, seed_id, "&step=-1")
    rpage.wait_for_function("() => batchscope.model.step === 0")
    assert rpage.locator("#rp-step").inner_text() == "0"
    assert rpage.locator("#hdr-step").inner_text() == "0"
    # A request's life deep-linked at step -1: its life up to the first step.
    open_replay(rpage, rec_server, seed_id, "&req=A&step=-1")
    rpage.wait_for_function("() => batchscope.model.step === 0")
    summary = rpage.locator("#rq-body .life-summary")
    summary.wait_for()
    assert summary.inner_text().endswith("life up to step 0"), summary.inner_text()
    for path in ("requests", "state", "blocks"):
        resp = rec_server.api("GET", f"/api/sessions/{seed_id}/{path}", params={"step": -2})
        assert resp.status_code == 422, (path, resp.status_code, resp.text)
        assert "step" in resp.text
    assert console.errors == []


def test_the_mooncake_link_downloads_the_recordings_trace(
    rpage: Any, rec_server: Server, seed_id: str, console: Console
) -> None:
    open_replay(rpage, rec_server, seed_id)
    link = rpage.locator("#export-mooncake")
    assert link.inner_text() == "Mooncake"
    # Beside the other downloads of the recording.
    assert rpage.locator("#recording .export a").all_inner_texts() == [
        "JSONL",
        "Perfetto",
        "Mooncake",
    ]
    with rpage.expect_download() as info:
        link.click()
    path = info.value.path()
    lines = Path(path).read_text().splitlines()
    rows = parse_trace(lines)
    # The seed's three arrivals: prompts of 4, 8 and 3 tokens, outputs of 2, 3 and 2.
    assert [(r.input_length, r.output_length) for r in rows] == [(4, 2), (8, 3), (3, 2)]
    assert all(set(json.loads(x)) >= {"timestamp", "input_length", "output_length", "hash_ids"}
               for x in lines)  # fmt: skip
    assert console.errors == []
