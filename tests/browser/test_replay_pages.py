"""Replay of a recording with more finished requests than the fold keeps: the dashboard's
request table shows every request of the recording at any step, paged from the server
(static/js/request_pages.js), scrolls to the last one, follows seeks and filters."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.db.session import make_engine, make_sessionmaker
from app.frames.row_index import MAX_DONE_ROWS
from tests.app.records.helpers import record_session
from tests.browser.harness import Console, Server, start_server, stop_process

SID = "s-replay-pages"
TOTAL_JS = "() => document.getElementById('requests-table').dataset.total"


@pytest.fixture(scope="module")
def big_server(tmp_path_factory: pytest.TempPathFactory, migrated_db: Path) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("pages")
    db_file = tmp / "recorded.sqlite"
    shutil.copyfile(migrated_db, db_file)
    engine = make_engine(f"sqlite:///{db_file}")
    # In a thread of its own: Playwright's event loop runs in this one.
    worker = threading.Thread(
        target=record_session,
        args=(make_sessionmaker(engine), SID),
        kwargs={"steps": 4000, "seed": 4},
    )
    worker.start()
    worker.join()
    engine.dispose()
    srv = start_server(tmp, migrated=db_file)
    try:
        yield srv
    finally:
        stop_process(srv.proc)


def _total(srv: Server, **params: Any) -> int:
    resp = srv.api("GET", f"/api/sessions/{SID}/requests", params={**params, "limit": 1})
    assert resp.status_code == 200, resp.text
    return int(resp.headers["x-total-count"])


def test_every_request_reaches_the_replay_table(
    browser: Any, big_server: Server, console: Console
) -> None:
    total = _total(big_server)
    assert total > MAX_DONE_ROWS + 100
    ctx = browser.new_context(viewport={"width": 1500, "height": 1000})
    try:
        page = console.watch(ctx.new_page(), big_server.url)
        page.goto(big_server.url + f"/?session={SID}")
        page.wait_for_function("() => batchscope.conn.snapshots > 0")
        page.wait_for_function(f"() => ({TOTAL_JS})() === '{total}'")
        # The oldest request, at the bottom of the newest-first table, is one scroll away.
        first = {"sort": "arrival", "limit": 1}
        oldest = big_server.api("GET", f"/api/sessions/{SID}/requests", params=first).json()
        oldest = oldest[0]["req"]
        page.evaluate("() => { const s = document.getElementById('req-scroll');"
                      " s.scrollTop = s.scrollHeight; }")  # fmt: skip
        page.locator(f'#requests-table tr[data-req="{oldest}"]').wait_for()
        # A seek: the table at that step, every request of it.
        step = 1500
        at_step = _total(big_server, step=step)
        page.evaluate(
            "k => { const s = document.getElementById('rp-scrub'); s.value = String(k);"
            " s.dispatchEvent(new Event('change')); }",
            step,
        )
        page.wait_for_function(f"() => ({TOTAL_JS})() === '{at_step}'")
        # A filter, answered by the server over the whole recording at that step.
        finished = _total(big_server, step=step, status="finished")
        page.select_option('#req-filters [name="status"]', "finished")
        page.wait_for_function(f"() => ({TOTAL_JS})() === '{finished}'")
        rows = page.locator("#requests-table tbody tr[data-status]")
        rows.first.wait_for()
        assert set(rows.evaluate_all("rs => rs.map(r => r.dataset.status)")) == {"finished"}
        assert console.errors == []
    finally:
        ctx.close()


GANTT_JS = "() => { const v = batchscope.timeline.view; return v && v.last ? v.last.ids : []; }"


def test_paging_the_table_reaches_every_request_in_the_gantt(
    browser: Any, big_server: Server, console: Console
) -> None:
    """The replay Gantt draws the table's window from the server (request_pages.js), so
    requests older than the newest MAX_DONE_ROWS finished (gone from the browser's fold)
    appear in it, with the segments a fold keeping every row has."""
    total = _total(big_server)
    assert total > MAX_DONE_ROWS + 100
    first = {"sort": "arrival", "limit": 1, "segments": 1}
    oldest = big_server.api("GET", f"/api/sessions/{SID}/requests", params=first).json()[0]
    assert oldest["status"] == "FINISHED" and oldest["segments"]
    ctx = browser.new_context(viewport={"width": 1500, "height": 1000})
    try:
        page = console.watch(ctx.new_page(), big_server.url)
        page.goto(big_server.url + f"/?session={SID}")
        page.wait_for_function("() => batchscope.conn.snapshots > 0")
        page.wait_for_function(f"() => ({TOTAL_JS})() === '{total}'")
        page.wait_for_function(f"() => ({GANTT_JS})().length > 0")
        req = oldest["req"]
        # The browser's own fold dropped it long ago; the Gantt does not show it yet.
        assert not page.evaluate("r => batchscope.model.reqs.has(r)", req)
        assert req not in page.evaluate(GANTT_JS)
        page.evaluate("() => { const s = document.getElementById('req-scroll');"
                      " s.scrollTop = s.scrollHeight; }")  # fmt: skip
        page.locator(f'#requests-table tr[data-req="{req}"]').wait_for()
        page.wait_for_function(f"r => ({GANTT_JS})().includes(r)", arg=req)
        drawn = page.evaluate(
            "r => batchscope.timeline.view.last.model.reqs.get(r).segs.map(s => s.slice(0, 4))", req
        )
        assert drawn == oldest["segments"]
        # The Gantt's rows are the table's, in its order (newest first at the bottom).
        table = page.locator("#requests-table tbody tr[data-req]").evaluate_all(
            "rs => rs.map(r => r.dataset.req)"
        )
        assert page.evaluate(GANTT_JS) == table
        assert int(page.locator("#gantt").get_attribute("data-drawn") or 0) > 0
        assert console.errors == []
    finally:
        ctx.close()
