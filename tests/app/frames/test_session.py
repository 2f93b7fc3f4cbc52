"""Every producer names and describes its sessions the same way (protocol.session)."""

from __future__ import annotations

import re

from engine.runner.sim import SimRunner
from protocol.session import engine_fields, new_session_id, node_opened, session_meta
from tests.engine.helpers import make_config

KEYS = {"name", "source", "engine", "runner", "simulated", "model", "device", "config",
        "started_at"}  # fmt: skip


def test_session_ids_sort_by_start_and_do_not_collide() -> None:
    ids = {new_session_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(re.fullmatch(r"s-\d{8}-\d{6}-[0-9a-f]{6}", i) for i in ids)


def test_local_and_pushing_engines_describe_themselves_alike() -> None:
    config = make_config().as_dict()
    fields = engine_fields(SimRunner(), config)
    local = session_meta("live", "local", **fields)
    pushed = node_opened("n1", {"name": "n1 (sim)", **fields})
    assert local.keys() >= KEYS
    assert pushed.pop("event") == "opened"
    assert pushed["source"] == "node:n1" and pushed["node"] == "n1"
    for key in KEYS - {"name", "source", "started_at"}:
        assert pushed[key] == local[key], key
    assert local["model"] == "none (simulated)" and local["config"] == config
    assert local["describe"]["runner"] == "sim"


def test_a_vllm_nodes_announce_fills_the_same_keys() -> None:
    announce = {"name": "gpu0 (vLLM m)", "engine": "vllm", "runner": "vllm",
                "simulated": False, "model": "m", "config": {"block_size": 16}}  # fmt: skip
    opened = node_opened("gpu0", announce)
    assert opened.keys() >= KEYS
    assert opened["engine"] == "vllm" and opened["device"] == "" and opened["model"] == "m"
