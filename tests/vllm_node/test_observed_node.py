"""Real `vllm serve` nodes observed by batchscope_vllm.ObservedScheduler, pushing to a real
`batchscope serve --no-engine` dashboard on loopback that records into SQLite.

Three servers, shared by the module's tests and started together (each takes ~1 min):
the sync loop (vLLM's CPU default), the async loop (a test-only vLLM plugin turns async
scheduling on: tests/vllm_node/async_plugin.py) and a node whose dashboard is down. The
dashboard starts first, on a free port, so the nodes know where to push. The module ends
by stopping the first two as operators do (c): each stop must end its session.

Bursts of 32 concurrent completions of mixed lengths (temperature 0) overflow the
4096-token KV pool, so requests wait and are preempted; what the dashboard recorded must
equal vLLM's own /metrics and every response, request by request (matched by the id vLLM
reports; see observed.py).
"""

from __future__ import annotations

import re
import socket
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from protocol.codes import HEAD_GATES
from tests.conftest import ROOT, TOKEN
from tests.vllm_node.async_plugin import ENV as ASYNC_PLUGIN_ENV
from tests.vllm_node.async_plugin import plugin_site
from tests.vllm_node.conftest import VllmNode, VllmNodePool
from tests.vllm_node.observed import (
    OBSERVED,
    Burst,
    Dashboard,
    Recorded,
    announce,
    check_recording,
    check_responses,
    counters,
    iterations,
    metric_deltas,
    recorded_requests,
    response_totals,
    run_burst,
    start_dashboard,
    wait_for,
    wait_recorded,
)
from tests.vllm_node.test_node_smoke import burst_requests

BURST = 32
SYNC, ASYNC, ORPHAN = "vllm-sync", "vllm-async", "vllm-orphan"
GONE_AFTER_S = 20.0
"""The dashboard's BATCHSCOPE_NODE_GONE_AFTER_S: a node silent this long has vanished."""
CAPACITY = ("kv_blocks", "token_budget", "max_num_seqs", "max_num_active_seqs")
OWN_GATES = ("remote_kv", "structured_output", "streaming_input", "lora_limit", "output_in_flight")
"""Gates of a request of its own, whatever the queue's gate: vLLM skips it (e.g. under async
scheduling a preempted request whose earlier output is still in flight)."""


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    dash = start_dashboard(tmp_path_factory.mktemp("dashboard"), node_gone_after_s=GONE_AFTER_S)
    try:
        yield dash
    finally:
        dash.stop()


@pytest.fixture(scope="module")
def closed_port() -> Iterator[int]:
    """A loopback port bound but never listening (connecting is refused), held for the
    module so no other server takes it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


@dataclass
class ObservedNodes:
    """The module's servers by name; `get` restarts one a test stopped."""

    pool: VllmNodePool
    configs: Mapping[str, tuple[Sequence[str], Mapping[str, str]]]

    def get(self, name: str) -> VllmNode:
        args, env = self.configs[name]
        return self.pool.get(args, env)


@pytest.fixture(scope="module")
def nodes(
    vllm_nodes: VllmNodePool,
    dashboard: Dashboard,
    closed_port: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> ObservedNodes:
    site = plugin_site(tmp_path_factory.mktemp("plugin-site"))
    orphan_url = f"ws://127.0.0.1:{closed_port}/ws/ingest"
    configs = {
        SYNC: (OBSERVED, dashboard.node_env(SYNC)),
        ASYNC: (
            # Drain mode at a stop (docs/operators.md): vLLM gives the engine core this
            # long before it kills it, so a SIGTERM to the API server alone ends the session.
            (*OBSERVED, "--shutdown-timeout", "10"),
            {
                **dashboard.node_env(ASYNC),
                ASYNC_PLUGIN_ENV: "1",
                "PYTHONPATH": f"{ROOT}:{site}",
            },
        ),
        ORPHAN: (
            OBSERVED,
            {"BATCHSCOPE_URL": orphan_url, "BATCHSCOPE_TOKEN": TOKEN, "BATCHSCOPE_NODE": ORPHAN},
        ),
    }
    vllm_nodes.get_many(configs.values())  # all three start at once
    return ObservedNodes(vllm_nodes, configs)


@dataclass
class Observed:
    """A burst on an observed node, with vLLM's counters and the recording."""

    node: VllmNode
    session: str
    burst: Burst
    deltas: dict[str, int]
    frames: list[dict[str, Any]]


def observe_burst(dash: Dashboard, node: VllmNode, name: str, seed: int) -> Observed:
    session = dash.session_of(name)
    before = counters(node)
    burst = run_burst(node, burst_requests(BURST, seed=seed))
    deltas = metric_deltas(node, before, BURST)
    frames = wait_recorded(dash, session, burst.tag, BURST)
    return Observed(node, session, burst, deltas, frames)


@pytest.fixture(scope="module")
def sync_burst(nodes: ObservedNodes, dashboard: Dashboard) -> Observed:
    return observe_burst(dashboard, nodes.get(SYNC), SYNC, seed=7)


def check_waiting(frames: list[dict[str, Any]], reqs: dict[str, Recorded]) -> Counter[str]:
    """While requests of the burst wait, every iteration says why each of them waits, in
    the structure docs/protocol.md gives (`waiting_detail`). Returns the reasons seen."""
    ids = set(reqs)
    lo = min(r.arrived_step for r in reqs.values() if r.arrived_step is not None)
    hi = max(r.finish_step for r in reqs.values() if r.finish_step is not None)
    waited = [
        it for it in iterations(frames) if lo <= it["step"] <= hi and it["queues"]["waiting"] > 0
    ]
    assert waited, "the burst never queued"
    seen: Counter[str] = Counter()
    for it in waited:
        at = f"step {it['step']}"
        reasons: dict[str, str] = it["waiting_reasons"]
        detail: dict[str, Any] = it.get("waiting_detail") or {}
        assert reasons, f"{at}: {it['queues']['waiting']} waiting, no reasons"
        assert set(reasons) <= ids, at
        unlisted = sum(v for k, v in detail.items() if k.startswith("unlisted_"))
        assert len(reasons) + unlisted == it["queues"]["waiting"], at
        gate, head = detail.get("gate"), detail.get("head")
        assert gate, f"{at}: reasons without a gate: {detail}"
        if it["preempted"]:
            # vLLM admits no waiting request in a step that preempted.
            assert gate == "preemption_this_step", at
        queue_wide = {r for r in reasons.values() if r not in OWN_GATES}
        if gate in HEAD_GATES:  # the head's alone: the rest wait in policy_order
            assert head is not None and reasons.get(head) == gate, at
            behind = {r for k, r in reasons.items() if k != head and r not in OWN_GATES}
            assert behind <= {"policy_order"}, at
        else:
            assert queue_wide in (set(), {gate}), at
        seen.update(reasons.values())
    assert seen.keys() & set(CAPACITY), seen
    return seen


# ---------------------------------------------------------------- a) the sync loop
def test_a_burst_is_recorded_as_vllm_counted_it(dashboard: Dashboard, sync_burst: Observed) -> None:
    b = sync_burst
    check_responses(b.burst)
    frames, reqs = check_recording(dashboard, b.session, b.burst, b.deltas)
    assert len(reqs) == BURST
    # The burst overflowed the KV pool: vLLM preempted, and the recording counted each.
    assert b.deltas["vllm:num_preemptions_total"] > 0, b.deltas
    meta = announce(frames)
    assert meta["engine"] == "vllm" and meta["source"] == f"node:{SYNC}"
    assert meta["engine_loop"] == "sync" and meta["config"]["async_scheduling"] is False
    assert meta["served_model_name"] == b.node.model
    assert str(meta["scheduler_class"]).endswith(".Scheduler"), meta["scheduler_class"]
    assert re.match(r"\d+\.\d+", str(meta["vllm_version"])), meta["vllm_version"]


# ---------------------------------------------------------------- b) why waiting
def test_b_waiting_requests_have_reasons(sync_burst: Observed) -> None:
    b = sync_burst
    seen = check_waiting(b.frames, recorded_requests(b.frames, b.burst.tag))
    # Preemptions happened (test a), so that gate was met too.
    assert seen["preemption_this_step"] > 0, seen


# ---------------------------------------------------------------- e) the async loop
def test_e_async_loop_is_recorded_as_vllm_counted_it(
    nodes: ObservedNodes, dashboard: Dashboard
) -> None:
    node = nodes.get(ASYNC)
    b = observe_burst(dashboard, node, ASYNC, seed=11)
    check_responses(b.burst)
    frames, reqs = check_recording(dashboard, b.session, b.burst, b.deltas)
    assert b.deltas["vllm:num_preemptions_total"] > 0, b.deltas
    meta = announce(frames)
    assert meta["engine_loop"] == "async", meta
    assert meta["config"]["async_scheduling"] is True
    assert str(meta["scheduler_class"]).endswith("AsyncScheduler"), meta["scheduler_class"]
    # The batch queue: a step applies the output of an earlier step's batch.
    its = iterations(frames)
    lagged = [
        it for it in its if it["updated_step"] is not None and it["updated_step"] < it["step"]
    ]
    assert lagged, "no step applied an earlier step's output"
    check_waiting(frames, reqs)


# ---------------------------------------------------------------- d) dashboard down
def _one(node: VllmNode) -> list[int]:
    """A single completion alone on `node` (batch of one: the same numbers everywhere)."""
    body = {"prompt": "the queue of the scheduler", "max_tokens": 24, "ignore_eos": True}
    response = httpx.post(
        node.url + "/v1/completions",
        json={"model": node.model, "temperature": 0, "return_token_ids": True, **body},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    ids: list[int] = response.json()["choices"][0]["token_ids"]
    return ids


def test_d_a_node_whose_dashboard_is_down_keeps_serving(
    nodes: ObservedNodes, dashboard: Dashboard
) -> None:
    node = nodes.get(ORPHAN)
    assert ORPHAN not in dashboard.nodes()
    before = counters(node)
    burst = run_burst(node, burst_requests(BURST, seed=13))
    check_responses(burst)
    deltas = metric_deltas(node, before, BURST)
    assert response_totals(burst) == {k: deltas[k] for k in response_totals(burst)}
    assert node.alive() and httpx.get(node.url + "/health", timeout=10).status_code == 200
    # The same answer as a node whose dashboard is up.
    assert _one(node) == _one(nodes.get(SYNC))
    assert node.alive(), node.log_tail()


# ---------------------------------------------------------------- c) a clean stop
def wait_ended(dashboard: Dashboard, name: str, session: str) -> dict[str, Any]:
    """The session's API row once it ended (by the adapter's closing mark or as vanished)."""
    ended: dict[str, Any] = wait_for(
        f"{name}: the session ended",
        lambda: (
            (r := httpx.get(f"{dashboard.url}/api/sessions/{session}", timeout=10).json())[
                "ended_at"
            ]
            and r
        ),
        timeout=90 + GONE_AFTER_S,
    )
    return ended


def check_closed(dashboard: Dashboard, name: str, session: str, ended: dict[str, Any]) -> None:
    """The session of node `name` ended by the adapter's closing mark (not as vanished)."""
    assert ended["end_reason"] == "closed", ended
    row = dashboard.session_row(session)
    assert row is not None and row.ended_at is not None and row.end_reason == "closed"
    last = dashboard.frames(session)[-1]
    assert (last["type"], last["data"]["event"]) == ("session", "closed"), last
    assert last["data"]["reason"] == "shutdown", last["data"]
    assert last["data"]["observer_errors"] == 0, last["data"]
    view = dashboard.nodes()[name]
    assert (view["state"], view["end_reason"]) == ("ended", "shutdown"), view


def test_c1_ctrl_c_ends_the_session(nodes: ObservedNodes, dashboard: Dashboard) -> None:
    """Ctrl-C at the terminal (SIGINT to the server's whole process group), vLLM's default
    `--shutdown-timeout 0`: the API server kills the engine core within milliseconds of the
    same signal. The adapter's handler in the engine core hands the closing mark to its
    sender first (batchscope_vllm/stop.py); that usually wins the race, but on a loaded host
    the kill can come first (docs/operators.md). Then the dashboard has no closing frame: it
    shows the node disconnected and ends the session `vanished` after
    BATCHSCOPE_NODE_GONE_AFTER_S. Either way the session ends and says how, and nothing
    recorded before the stop is lost. (The handler chaining itself is tested without a race
    in tests/vllm/test_adapter.py; a drained stop's clean end in test c2.)"""
    node = nodes.get(SYNC)
    session = dashboard.session_of(SYNC)
    _one(node)
    recorded = wait_for(
        f"{SYNC}: the request recorded", lambda: finished_marks(dashboard.frames(session))
    )
    node.stop()
    ended = wait_ended(dashboard, SYNC, session)
    if ended["end_reason"] == "closed":
        check_closed(dashboard, SYNC, session, ended)
        return
    # The kill came first: ended as vanished, honestly, with the recording intact.
    assert ended["end_reason"] == "vanished", ended
    view = dashboard.nodes()[SYNC]
    assert (view["state"], view["end_reason"]) == ("ended", "vanished"), view
    frames = dashboard.frames(session)
    assert finished_marks(frames) >= recorded
    assert not any(f["type"] == "session" and f["data"].get("event") == "closed" for f in frames)


def finished_marks(frames: list[dict[str, Any]]) -> int:
    """How many `finished` request marks the frames hold."""
    return sum(1 for f in frames if f["type"] == "request" and f["data"]["kind"] == "finished")


def test_c2_sigterm_to_the_api_server_ends_the_session(
    nodes: ObservedNodes, dashboard: Dashboard
) -> None:
    """SIGTERM to the API server alone (`kill PID`, systemd, Kubernetes), with
    `--shutdown-timeout 10`: vLLM passes the stop to the engine core and waits for it; the
    idle node's session ends at once."""
    node = nodes.get(ASYNC)
    session = dashboard.session_of(ASYNC)
    _one(node)
    node.terminate()
    check_closed(dashboard, ASYNC, session, wait_ended(dashboard, ASYNC, session))
