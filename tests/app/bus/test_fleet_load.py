"""A simulated fleet (tools/fleet_load.py) through a real nats-server to two real
dashboards: each sees every node, with its rates and queue, on /api/fleet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.app.bus import fleet_procs as fp
from tests.conftest import free_port
from tools import fleet_load

NODES = 200


def page(port: int) -> dict[str, Any]:
    out: dict[str, Any] = httpx.get(f"http://127.0.0.1:{port}/api/fleet", timeout=10).json()
    return out


def test_a_simulated_fleet_reaches_two_dashboards(tmp_path: Path) -> None:
    bus = fp.NatsServer(tmp_path / "js")
    ports = [free_port(), free_port()]
    dashes = []
    try:
        for i, port in enumerate(ports):
            db = f"sqlite:///{tmp_path}/{i}.db"
            dashes.append(fp.dashboard(port, db, bus.url, f"d{i}", tmp_path / f"d{i}.log"))
        load = fleet_load.run(bus.url, NODES, seconds=6.0, procs=1)
        assert load["nodes"] == NODES and load["steps"] > NODES * 20
        for port in ports:
            fp.wait_for(lambda p=port: page(p)["bus"]["steps"] >= load["steps"], 90, "all steps")
            got = page(port)
            assert got["bus"]["nodes"] == NODES and got["bus"]["steps"] == load["steps"]
            rows = got["nodes"]
            assert len(rows) == NODES and all(r["step"] > 20 for r in rows)
            assert sum(r["missed_steps"] for r in rows) == 0
            assert any(r["waiting"] for r in rows) and all(r["kv_total"] == 4096 for r in rows)
    finally:
        for proc in dashes:
            fp.stop(proc)
        bus.stop()
