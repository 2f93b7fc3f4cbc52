"""A live viewer that falls behind gets a compact snapshot (the latest steps, the latest
finished rows) and still reaches the whole session: the request table and the Gantt page
the older requests from the recording, the page says that it shows only part live, and
every count on it is the server's (/api/requests, /api/state), not a truncated list's."""

from __future__ import annotations

import time
from typing import Any

from tests.browser.harness import Console, Server

EARLY = 200
"""Finished requests before the viewer falls behind: more than a compact snapshot keeps."""


def _finished(server: Server) -> int:
    rows = server.api("GET", "/api/requests").json()
    return sum(r["status"] == "FINISHED" for r in rows)


def test_a_resynced_viewer_pages_what_its_snapshot_left_out(
    page: Any, server: Server, console: Console
) -> None:
    r = server.api("POST", "/api/requests", json={"prompt_len": 8, "max_tokens": 2, "count": EARLY})
    assert r.status_code == 201, r.text
    first = r.json()["req_ids"][0]
    # The viewer scrolls to the oldest requests (at the bottom) while its table is the
    # browser's own: the place it scrolled to stays when the table turns to pages later
    # (a compact snapshot), while the server counts them (no scroll again below).
    table = "document.getElementById('requests-table').dataset"
    page.wait_for_function(f"() => {table}.total === '{EARLY}'", timeout=30_000)
    page.evaluate(
        "() => { const s = document.getElementById('req-scroll'); s.scrollTop = s.scrollHeight; }"
    )
    page.locator(f'#requests-table tr[data-req="{first}"]').wait_for(timeout=30_000)
    deadline = time.monotonic() + 90
    while _finished(server) < EARLY:
        assert time.monotonic() < deadline, "the early requests did not finish"
        time.sleep(0.2)
    # Frames keep coming while the page's main thread is busy for 3 s: it reads nothing,
    # answers no ping, and the server cuts it over to a gap and a compact snapshot.
    r = server.api("POST", "/api/requests", json={"prompt_len": 8, "max_tokens": 1024, "count": 8})
    assert r.status_code == 201, r.text
    page.wait_for_function("() => batchscope.model.queues.running > 0", timeout=30_000)
    snapshots = page.evaluate("() => batchscope.conn.snapshots")
    page.evaluate("() => { const t = Date.now(); while (Date.now() - t < 3000) {} }")
    page.wait_for_function(
        f"() => batchscope.conn.snapshots > {snapshots} && !!batchscope.model.leftOut",
        timeout=30_000,
    )
    assert server.api("POST", "/api/pause").status_code == 200
    state = server.api("GET", "/api/state").json()
    page.wait_for_function(
        f"() => document.getElementById('hdr-step').textContent === '{state['step']}'",
        timeout=30_000,
    )
    # The page says what it left out, and where the rest comes from.
    note = page.locator("#left-out")
    assert note.is_visible()
    assert "paged from the recording" in note.inner_text()
    # Every count is the server's.
    rows = server.api("GET", "/api/requests").json()
    last = state["history"][-1]
    assert len(rows) == state["totals"]["requests"] == EARLY + 8
    header = page.evaluate(
        "() => ['hdr-requests', 'hdr-running', 'hdr-waiting']"
        ".map((id) => document.getElementById(id).textContent)"
    )
    assert header == [str(len(rows)), str(last["running"]), str(last["waiting"])]
    assert page.evaluate("() => batchscope.model.order.length") < len(rows)  # it was compacted
    # The earliest request, left out of the snapshot, is still where the viewer scrolled:
    # paged from the recording into the table (oldest at the bottom) and the Gantt beside it.
    page.wait_for_function(
        f"() => {table}.ready === 'true' && {table}.total === '{len(rows)}'", timeout=30_000
    )
    page.locator(f'#requests-table tr[data-req="{first}"]').wait_for(timeout=30_000)
    assert page.evaluate("() => document.getElementById('req-scroll').scrollTop") > 0
    page.wait_for_function(
        f"() => batchscope.requestPages.gantt(batchscope.model).ids.includes('{first}')",
        timeout=30_000,
    )
    assert console.errors == []
