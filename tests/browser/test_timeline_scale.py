"""A 10,000-request session in the browser: the timeline paints every row, the table keeps
only the rows in view in the DOM, and filters give the same requests as the JSON twin.

Speed targets (first paint <= 500 ms, >= 30 fps at 500 running) are measured by
tools/ui_bench.py (`make bench`), not here."""

from __future__ import annotations

from typing import Any

from tests.browser.harness import Console, Server

N = 10_240


def rows_are(page: Any, element: str, n: int) -> None:
    page.wait_for_function(
        "([el, n]) => document.getElementById(el).dataset.rows === String(n)", arg=[element, n]
    )


def page_ids(page: Any) -> list[str]:
    return list(page.evaluate("() => batchscope.filters.ids(batchscope.model)"))


def twin_ids(server: Server, **query: str) -> list[str]:
    rows = server.api("GET", "/api/requests", params={"sort": "-arrival", **query}).json()
    return [r["req"] for r in rows]


def test_a_10k_request_session_paints_and_filters(
    page: Any, server: Server, console: Console
) -> None:
    assert server.api("POST", "/api/pause").status_code == 200
    for _ in range(N // 256):
        r = server.api("POST", "/api/requests", json={"prompt_len": 16, "max_tokens": 8,
                                                      "count": 256})  # fmt: skip
        assert r.status_code == 201, r.text
    assert server.api("POST", "/api/step").status_code == 200  # some run, the rest wait
    page.wait_for_function(
        f"() => batchscope.model.order.length === {N} && batchscope.model.step >= 0"
    )
    page.reload()  # the first paint from a snapshot of all of them
    page.wait_for_function(f"() => document.getElementById('gantt').dataset.shownRows === '{N}'")
    assert page.get_attribute("#gantt", "data-drawn") == str(N)
    rows_are(page, "requests-table", N)
    assert page.locator("#requests-table tbody tr").count() < 60  # virtualized

    page.fill("#req-search", "req-999")
    rows_are(page, "gantt", 11)
    assert page_ids(page) == twin_ids(server, q="req-999")
    page.fill("#req-search", "")
    page.select_option('#req-filters [name="status"]', "running")
    running = twin_ids(server, status="running")
    rows_are(page, "gantt", len(running))
    assert 0 < len(running) < 64 and page_ids(page) == running
    page.select_option('#req-filters [name="status"]', "waiting")
    page.select_option('#req-filters [name="reason"]', "token_budget")
    waiting = twin_ids(server, status="waiting", reason="token_budget")
    rows_are(page, "gantt", len(waiting))
    assert page_ids(page) == waiting and len(waiting) > 10_000 - 64
    # The table's window follows its scroll position.
    page.evaluate("() => { document.getElementById('req-scroll').scrollTop = 1e9; }")
    page.wait_for_function("() => +document.getElementById('requests-table').dataset.first > 9900")
    last = page.locator("#requests-table tbody tr").last.get_attribute("data-req")
    assert last == waiting[-1]
    assert console.errors == []
