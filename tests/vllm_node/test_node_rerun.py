"""A real vLLM node's recording re-runs (issue 31): the node's knobs map onto our engine
(those it lacks, at vLLM's defaults, are dropped; any other is named, not a 422), its
prompts are rebuilt from their blocks' keys, requests that stopped on EOS stop at their
recorded length, and the re-run on the recording's clock decides as the node did.

A sync node and an async node (vLLM's async scheduling, by the test plugin) push to a real
`batchscope serve --no-engine` dashboard; a burst of 32 mixed completions (half may stop
on EOS) overflows the KV pool; POST /api/sessions/ID/rerun {} on the dashboard.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, TOKEN
from tests.vllm_node.async_plugin import ENV as ASYNC_PLUGIN_ENV
from tests.vllm_node.async_plugin import plugin_site
from tests.vllm_node.conftest import VllmNodePool
from tests.vllm_node.observed import (
    OBSERVED,
    Dashboard,
    iterations,
    run_burst,
    start_dashboard,
    wait_recorded,
)
from tests.vllm_node.test_node_smoke import burst_requests

BURST = 32
SYNC, ASYNC = "vllm-rerun-sync", "vllm-rerun-async"


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    dash = start_dashboard(tmp_path_factory.mktemp("dashboard"))
    try:
        yield dash
    finally:
        dash.stop()


@pytest.fixture(scope="module")
def recorded(
    vllm_nodes: VllmNodePool, dashboard: Dashboard, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """A burst recorded on each node: {loop: session}."""
    site = plugin_site(tmp_path_factory.mktemp("plugin-site"))
    async_env = {**dashboard.node_env(ASYNC), ASYNC_PLUGIN_ENV: "1", "PYTHONPATH": f"{ROOT}:{site}"}
    nodes = vllm_nodes.get_many([(OBSERVED, dashboard.node_env(SYNC)), (OBSERVED, async_env)])
    out: dict[str, str] = {}
    for loop, name, node in (("sync", SYNC, nodes[0]), ("async", ASYNC, nodes[1])):
        session = dashboard.session_of(name)
        burst = run_burst(node, burst_requests(BURST, seed=11))
        wait_recorded(dashboard, session, burst.tag, BURST)
        out[loop] = session
    return out


def plans(frames: list[dict[str, Any]]) -> list[Any]:
    return [
        (
            [(r["req"], r["n"], r["start"]) for r in it["scheduled"]],
            [p["req"] for p in it["preempted"]],
            [f["req"] for f in it["finished"]],
            it["arrived"],
        )
        for it in iterations(frames)
    ]


@pytest.mark.parametrize("loop", ["sync", "async"])
def test_a_node_recording_reruns_as_the_node_decided(
    dashboard: Dashboard, recorded: dict[str, str], loop: str
) -> None:
    session = recorded[loop]
    r = httpx.post(
        f"{dashboard.url}/api/sessions/{session}/rerun",
        json={},
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=300,
    )
    assert r.status_code == 200, r.text
    result = r.json()
    assert result["release_chosen"].startswith("the node"), result
    node = plans(dashboard.frames(session))
    again = plans(dashboard.frames(result["session"]))
    same = sum(a == b for a, b in zip(node, again, strict=False))
    first = next((i for i, (a, b) in enumerate(zip(node, again, strict=False)) if a != b), None)
    print(f"{loop}: {same}/{len(node)} steps as the node decided (re-run: {len(again)} steps;"
          f" first difference: {first}; not modelled: {result['not_modelled']})")  # fmt: skip
    assert any(f for p in node for f in p[1]), "the burst never preempted"
    assert first is None or first >= len(node) - 1, (first, node[first], again[first])
    assert same >= len(node) - 1
