"""The nodes page (issue 6): a `serve --no-engine` dashboard lists a node pushed by
`batchscope engine --push`, refreshes it every 2 s, opens its live session, and shows
the node as disconnected once the engine stops."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.harness import ROOT, Console, Server, start_server, stop_process
from tests.lifeline import die_with_us


@pytest.fixture
def observer(tmp_path: Path, migrated_db: Path) -> Iterator[Server]:
    srv = start_server(tmp_path, migrated=migrated_db, engine=False)
    try:
        yield srv
    finally:
        stop_process(srv.proc)


@pytest.fixture
def node(observer: Server, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    push = observer.url.replace("http://", "ws://") + "/ws/ingest"
    cmd = [
        sys.executable, "-m", "app.cli", "engine", "--push", push, "--token", observer.token,
        "--runner", "sim", "--node", "n1",
    ]  # fmt: skip
    with (tmp_path / "engine.log").open("wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_us()
        )
    try:
        yield proc
    finally:
        stop_process(proc)


def test_nodes_page_lists_a_pushing_node_and_opens_its_session(
    browser: Any, observer: Server, node: subprocess.Popen[bytes], console: Console
) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = console.watch(context.new_page(), observer.url)
        page.goto(observer.url + f"/launch?token={observer.token}")
        page.goto(observer.url + "/nodes")
        row = page.locator('#nodes-table tr[data-node="n1"][data-state="live"]')
        row.wait_for(timeout=20_000)
        first = int(row.locator("td.num").nth(1).inner_text().replace(",", ""))
        # The htmx partial refreshes every 2 s (the sim engine keeps pushing frames).
        page.wait_for_function(
            "n => { const td = document.querySelectorAll("
            "'#nodes-table tr[data-node=\"n1\"] td.num')[1];"
            " return td && parseInt(td.textContent.replace(/,/g, ''), 10) > n; }",
            arg=first,
            timeout=6_000,
        )
        session = row.locator("td.mono a").inner_text()
        views = observer.api("GET", "/api/nodes").json()
        assert [v["session"] for v in views if v["node"] == "n1"] == [session]

        row.locator("a.open").click()
        page.wait_for_function(
            # (window.batchscope: the page's modules may not have run yet.)
            "s => window.batchscope && batchscope.model.session === s"
            " && batchscope.model.step >= 0",
            arg=session,
        )
        page.wait_for_selector("#conn-state[data-state=live]")
        assert page.locator("#hdr-session").inner_text() == session

        stop_process(node)
        page.goto(observer.url + "/nodes")
        page.locator('#nodes-table tr[data-node="n1"][data-state="ended"]').wait_for(timeout=10_000)
        assert console.errors == []
        assert console.foreign == []
    finally:
        context.close()
