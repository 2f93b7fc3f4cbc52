"""Controls follow the page (issue 31): a pushed node's page, opened from /nodes on a
dashboard that runs its own engine, drives that node: Pause pauses the node while the
local engine keeps stepping, knobs apply to the node alone, and the local engine's panels
(workload, process, scenarios) are not on its page. An observed vLLM node's page shows its
controls disabled with the reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import connect

from tests.browser.harness import ROOT, Console, Server, start_server, stop_process
from tests.lifeline import die_with_us


@pytest.fixture
def dashboard(tmp_path: Path, migrated_db: Path) -> Iterator[Server]:
    srv = start_server(tmp_path, workload="poisson", migrated=migrated_db)
    try:
        yield srv
    finally:
        stop_process(srv.proc)


@pytest.fixture
def node(dashboard: Server, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    push = dashboard.url.replace("http://", "ws://") + "/ws/ingest"
    cmd = [
        sys.executable, "-m", "app.cli", "engine", "--push", push, "--token", dashboard.token,
        "--runner", "sim", "--node", "n1", "--workload", "poisson",
    ]  # fmt: skip
    env = {**os.environ, "BATCHSCOPE_MAX_NUM_SEQS": "7"}
    with (tmp_path / "engine.log").open("wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_us()
        )
    try:
        yield proc
    finally:
        stop_process(proc)


def _state(srv: Server, session: str | None = None) -> dict[str, Any]:
    params = {"session": session} if session else {}
    body: dict[str, Any] = srv.api("GET", "/api/state", params=params).json()
    return body


def _until(fn: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not fn():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)


def test_a_pushed_nodes_page_pauses_and_tunes_that_node_not_the_local_engine(
    browser: Any, dashboard: Server, node: subprocess.Popen[bytes], console: Console
) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = console.watch(context.new_page(), dashboard.url)
        page.goto(dashboard.url + f"/launch?token={dashboard.token}")
        local = _state(dashboard)["session"]
        page.goto(dashboard.url + "/nodes")
        row = page.locator('#nodes-table tr[data-node="n1"][data-state="live"]')
        row.wait_for(timeout=20_000)
        remote = row.locator("td.mono a").inner_text()
        assert remote != local

        # Long requests on both engines: each has a step to take throughout.
        for session in (local, remote):
            r = dashboard.api(
                "POST", "/api/requests", params={"session": session},
                json={"prompt_len": 400, "max_tokens": 600},
            )  # fmt: skip
            assert r.status_code == 201, r.text
        row.locator("a.open").click()
        page.wait_for_url("**/?live=*")
        page.wait_for_load_state()
        page.wait_for_function(
            # (window.batchscope: the page's modules may not have run yet.)
            "s => window.batchscope && batchscope.model.session === s"
            " && batchscope.model.step >= 0",
            arg=remote,
        )
        # The node's own knobs; none of the local engine's panels.
        assert page.locator("#cfg-mns").input_value() == "7"
        for local_only in ("#workload-form", "#engine-panel", "#scenarios"):
            assert page.locator(local_only).count() == 0, local_only
        assert page.locator("#control-refusal").count() == 0

        page.locator("#btn-pause").click()
        page.wait_for_selector("#run-state[data-state=paused]", timeout=10_000)
        _until(lambda: _state(dashboard, remote)["paused"])
        frozen, local_step = _state(dashboard, remote)["step"], _state(dashboard)["step"]
        # The local engine keeps stepping: a fresh request gives it work even where a slow
        # machine let the first one finish while the page loaded.
        r = dashboard.api(
            "POST", "/api/requests", params={"session": local},
            json={"prompt_len": 400, "max_tokens": 600},
        )  # fmt: skip
        assert r.status_code == 201, r.text
        _until(lambda: _state(dashboard)["step"] > local_step + 3)
        assert _state(dashboard)["paused"] is False
        time.sleep(0.5)
        assert _state(dashboard, remote)["step"] == frozen

        page.locator("#cfg-mns").fill("5")
        page.locator("#btn-config").click()
        page.wait_for_selector("#flash :text('applied max_num_seqs=5')", timeout=10_000)
        knobs = dashboard.api("GET", "/api/config", params={"session": remote}).json()
        assert knobs["config"]["max_num_seqs"] == 5
        assert dashboard.api("GET", "/api/config").json()["config"]["max_num_seqs"] == 16

        page.locator("#btn-resume").click()
        page.wait_for_selector("#run-state[data-state=running]", timeout=10_000)
        _until(lambda: _state(dashboard, remote)["step"] > frozen)
        assert console.errors == []
        assert console.foreign == []
    finally:
        context.close()


def test_an_observed_vllm_nodes_page_shows_its_controls_disabled_with_the_reason(
    browser: Any, dashboard: Server, console: Console
) -> None:
    headers = {"Authorization": f"Bearer {dashboard.token}"}
    url = dashboard.url.replace("http://", "ws://") + "/ws/ingest"
    with connect(url, additional_headers=headers) as ws:
        ws.send(
            json.dumps({"type": "announce", "node": "gpu-7", "session": "s-vllm", "engine": "vllm"})
        )
        assert json.loads(ws.recv(timeout=10))["type"] == "welcome"
        opened = {"event": "opened", "name": "gpu-7", "source": "node:gpu-7"}
        frame = {"v": 1, "type": "session", "session": "s-vllm", "seq": 1, "data": opened}
        ws.send(json.dumps(frame))
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        try:
            page = console.watch(context.new_page(), dashboard.url)
            page.goto(dashboard.url + f"/launch?token={dashboard.token}")
            page.goto(dashboard.url + "/?live=s-vllm")
            refusal = page.locator("#control-refusal")
            assert "read-only" in refusal.inner_text() and "gpu-7" in refusal.inner_text()
            assert page.locator("#btn-pause").is_disabled()
            assert page.locator("#btn-inject").is_disabled()
            assert page.locator("#btn-config").is_disabled()
            assert "read-only" in page.locator("#config-refusal").inner_text()
        finally:
            context.close()
