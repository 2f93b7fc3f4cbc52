"""The fleet bus through faults, all real processes: a nats-server with JetStream that the
test starts on its own port and store and restarts mid-run, `engine --bus` nodes, and two
`serve --bus` dashboards (one of them restarted too). Nothing JetStream kept is lost; what
it did not keep is a marked gap; every seq of every session is recorded or inside a gap."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.app.bus import fleet_procs as fp
from tests.conftest import free_port


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[fp.NatsServer]:
    server = fp.NatsServer(tmp_path / "jetstream")
    yield server
    server.stop()


def _frames(port: int, name: str) -> int:
    return next((n["last_seq"] for n in fp.nodes(port) if n["node"] == name), 0)


@pytest.mark.parametrize(
    "restart", [signal.SIGTERM, signal.SIGKILL], ids=["stopped-in-order", "killed"]
)
def test_two_dashboards_lose_nothing_through_bus_and_dashboard_restarts(
    bus: fp.NatsServer, tmp_path: Path, restart: signal.Signals
) -> None:
    ports = [free_port(), free_port()]
    dbs = [f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db"]
    logs = [tmp_path / "dash-a.log", tmp_path / "dash-b.log"]
    dashes = [fp.dashboard(p, d, bus.url, f"dash{i}", g) for i, (p, d, g) in
              enumerate(zip(ports, dbs, logs, strict=True))]  # fmt: skip
    names = ["n-1", "n-2"]
    node_logs = [tmp_path / f"{n}.log" for n in names]
    nodes = [
        fp.node(bus.url, n, g, "--detail", "always") for n, g in zip(names, node_logs, strict=True)
    ]
    try:
        for port in ports:
            for name in names:
                fp.wait_for(lambda p=port, n=name: _frames(p, n) > 50, 90, f"{name} on {port}")
        bus.stop()  # the bus goes away mid-run ...
        time.sleep(3)
        bus.start()  # ... and comes back on the same store
        fp.wait_for(lambda: _frames(ports[0], "n-1") > 0, 30, "frames after the restart")
        # A dashboard restarts: stopped in order (SIGTERM to its group, as systemd does),
        # or killed (its writer too). Either way it resumes from what it recorded.
        fp.stop(dashes[0], restart)
        if restart == signal.SIGTERM:  # in order, well within fp.stop's 60 s
            said = logs[0].read_text()
            assert dashes[0].returncode == -signal.SIGTERM, said[-3000:]
            assert "database is locked" not in said and "shutdown:" not in said, said[-3000:]
        time.sleep(2)
        dashes[0] = fp.dashboard(ports[0], dbs[0], bus.url, "dash0", logs[0])
        time.sleep(3)
        for proc in nodes:
            fp.stop(proc)
        lasts = {n: fp.last_seq_of(g) for n, g in zip(names, node_logs, strict=True)}
        for port in ports:
            for name in names:
                fp.wait_for(lambda p=port, n=name: _frames(p, n) >= lasts[n], 90, f"{name} drained")
            for view in fp.nodes(port):
                last = lasts[view["node"]]
                sid = view["session"]
                fp.wait_for(lambda p=port, s=sid, n=last: fp.recorded_through(p, s) >= n, 90, sid)
                seqs, gaps = fp.recorded(port, sid)
                assert fp.covered(seqs, gaps, last) == []
                # The flight recorder outlasted the outage: nothing was lost, no gap.
                assert gaps == [], (port, view["node"], gaps)
                assert seqs == list(range(1, last + 1))
                assert view["state"] == "ended" and view["end_reason"] == "shutdown"
    finally:
        for proc in nodes + dashes:
            fp.stop(proc)


def test_what_the_bus_did_not_keep_is_a_marked_gap(bus: fp.NatsServer, tmp_path: Path) -> None:
    port = free_port()
    dash = fp.dashboard(port, f"sqlite:///{tmp_path}/a.db", bus.url, "gaps", tmp_path / "d.log")
    log = tmp_path / "n.log"
    # A flight recorder of 100 frames cannot outlast an outage of several seconds.
    proc = fp.node(bus.url, "small", log, "--detail", "always", "--buffer", "100", rate=40)
    try:
        fp.wait_for(lambda: _frames(port, "small") > 50, 90, "the node's first frames")
        before = _frames(port, "small")
        bus.stop()
        time.sleep(8)
        bus.start()
        fp.wait_for(lambda: _frames(port, "small") > before + 150, 90, "frames after")
        fp.stop(proc)
        last = fp.last_seq_of(log)
        fp.wait_for(lambda: _frames(port, "small") >= last, 90, "the node drained")
        (view,) = fp.nodes(port)
        sid = view["session"]
        fp.wait_for(lambda: fp.recorded_through(port, sid) >= last, 90, "the recording")
        seqs, gaps = fp.recorded(port, view["session"])
        assert gaps, "the frames lost in the outage are marked"
        assert view["gaps"] == len(gaps) and view["missing"] > 0
        assert fp.covered(seqs, gaps, last) == []
        assert seqs == sorted(seqs) and seqs[-1] == last
    finally:
        fp.stop(proc)
        fp.stop(dash)
