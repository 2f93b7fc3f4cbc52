"""The page's request query (static/js/filters.js, its words and operators generated from
app/request_table.py into static/js/query.js) keeps and orders the same requests as the
JSON twin for every sort, both directions, and the yes/no/either filters."""

from __future__ import annotations

from typing import Any

from tests.browser.harness import Console, Server
from tests.browser.test_forensics import shown_kv_pressure

QUERIES: list[dict[str, str]] = [
    {"sort": "arrival"},
    {"sort": "-arrival"},
    {"sort": "ttft"},
    {"sort": "-ttft"},
    {"sort": "e2e"},
    {"sort": "-e2e"},
    {"sort": "preemptions"},
    {"sort": "-preemptions"},
    {"sort": "-e2e", "preempted": "yes"},
    {"sort": "ttft", "preempted": "no"},
    {"sort": "-preemptions", "prefix_hit": "any", "preempted": "any"},
    {"sort": "arrival", "status": "finished,running"},
    {"sort": "-arrival", "status": "waiting"},
]


def test_the_pages_query_keeps_and_orders_what_the_twin_does(
    page: Any, server: Server, console: Console
) -> None:
    _, state = shown_kv_pressure(page, server)
    assert any(r["num_preemptions"] for r in state["requests"])  # both sides of `preempted`
    keys = sorted({k for q in QUERIES for k in q})
    for query in QUERIES:
        twin = [r["req"] for r in server.api("GET", "/api/requests", params=query).json()]
        shown = page.evaluate(
            "q => { batchscope.filters.set(q); return batchscope.filters.ids(batchscope.model); }",
            {k: query.get(k, "") for k in keys},
        )
        assert shown == twin, query
    assert console.errors == []
