"""A real `batchscope serve` stopped by SIGTERM or SIGINT (to its process group, as systemd
and a terminal do) while frames flow in from its own engine and over the fleet bus and a
lab sweep runs, on a SQLite file and on PostgreSQL. It exits in order: no "database is
locked", a sound database, every session it recorded ended with a reason and without a
hole, the sweep's finished points kept (none failed by the stop), and the dashboard starts
again on the same database and records on from where the bus left off."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from app.db.session import make_engine
from tests.app.bus import fleet_procs as fp
from tests.conftest import ROOT, TOKEN, free_port, wait_healthy
from tests.lifeline import die_with_us

EXIT_S = 300.0
"""Above the shutdown's own bounds (10 s for connections, then steps bounded to about 4
minutes in all, app.main._shutdown): only a stop that ignores its bounds fails."""
SWEEP = {
    "source": "workload",
    "workload": "poisson:rate=50,n=300,prompt=64,output=16",
    "seed": 7,
    "knob": "max_num_batched_tokens",
    "values": "64:1024:16",
    "knob2": "max_num_seqs",
    "values2": "4,8,16",
    "repeat": 2,
}
EXIT_CODES = {signal.SIGTERM: -signal.SIGTERM, signal.SIGINT: 130}
"""uvicorn stops gracefully, then raises the signal again: SIGTERM ends the process by it;
SIGINT becomes KeyboardInterrupt, which the CLI answers with 130."""


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[fp.NatsServer]:
    store = tmp_path / "jetstream"
    store.mkdir()
    server = fp.NatsServer(store)
    yield server
    server.stop()


def _serve(port: int, db: str, bus: str, log: Path, workload: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "app.cli", "serve", "--runner", "sim", "--workload", workload]
    cmd += ["--port", str(port), "--token", TOKEN, "--database-url", db, "--bus", bus, "--migrate"]
    env = {**os.environ, "BATCHSCOPE_BUS_CONSUMER": "stop-test", "BATCHSCOPE_WORKLOAD_RATE": "20"}
    env["PYTHONFAULTHANDLER"] = "1"  # a hung stop is shown: SIGABRT dumps every thread
    out = open(log, "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=die_with_us(),
    )
    if not wait_healthy(proc, f"http://127.0.0.1:{port}", 120):
        fp.stop(proc, signal.SIGKILL)
        raise AssertionError("the dashboard did not start:\n" + log.read_text()[-3000:])
    return proc


def _wait(pred: object, seconds: float, what: str) -> None:
    fp.wait_for(pred, seconds, what)


def _recorded(db: str) -> dict[str, tuple[str | None, int, list[int]]]:
    """Straight from the database: each session's (end reason, last seq, seqs stored)."""
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT id, end_reason, last_seq FROM sessions")).all()
            out = {}
            for sid, reason, last in rows:
                seqs = conn.execute(
                    text(
                        "SELECT seq FROM events WHERE session_id = :s "
                        "UNION SELECT seq FROM iterations WHERE session_id = :s ORDER BY 1"
                    ),
                    {"s": sid},
                ).scalars()
                out[sid] = (reason, int(last), list(seqs))
            return out
    finally:
        engine.dispose()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_leaves_every_recording_whole(
    database_url: str, bus: fp.NatsServer, tmp_path: Path, sig: signal.Signals
) -> None:
    port, log = free_port(), tmp_path / "serve.log"
    node_log = tmp_path / "node.log"
    dash = _serve(port, database_url, bus.url, log, "poisson")
    node = fp.node(bus.url, "n-stop", node_log, "--detail", "always", rate=40)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
            sweep = c.post("/api/lab/sweeps", json=SWEEP, timeout=60).json()["sweep"]
            _wait(lambda: fp.nodes(port) and fp.nodes(port)[0]["last_seq"] > 50, 120, "bus")
            _wait(
                lambda: c.get(f"/api/lab/sweeps/{sweep}").json()["progress"]["done"] >= 2,
                120,
                "sweep points",
            )
            seen = {s["id"] for s in c.get("/api/sessions").json()}
            running = c.get(f"/api/lab/sweeps/{sweep}").json()
        assert running["status"] == "running", running["progress"]  # the stop cuts it off
        (node_sid,) = [v["session"] for v in fp.nodes(port) if v["node"] == "n-stop"]
        assert len(seen) >= 2  # the engine's own session and the bus node's
        os.killpg(dash.pid, sig)
        try:
            code = dash.wait(EXIT_S)
        except subprocess.TimeoutExpired:
            os.kill(dash.pid, signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                dash.wait(30)
            fp.stop(dash, signal.SIGKILL)
            raise AssertionError("no exit:\n" + log.read_text()[-20000:]) from None
        said = log.read_text()
        assert code == EXIT_CODES[sig], said[-3000:]
        assert "database is locked" not in said, said[-3000:]
        assert "could not be written" not in said and "shutdown:" not in said, said[-3000:]

        if database_url.startswith("sqlite"):
            path = database_url.removeprefix("sqlite:///")
            with sqlite3.connect(path) as conn:
                assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        recorded = _recorded(database_url)
        assert seen <= set(recorded)
        for sid, (reason, last, seqs) in recorded.items():
            assert reason is not None, f"{sid} was left live"
            assert last > 0 and seqs == list(range(1, last + 1)), (sid, last, seqs[-5:])
        interrupted = _sweep_row(database_url, sweep)
        assert interrupted == ("interrupted", 0), interrupted  # its points kept, none failed

        # The dashboard starts again on the same database and the bus node's recording
        # goes on from where the stop left it: nothing the stop left unwritten was acked.
        dash = _serve(port, database_url, bus.url, log, "none")
        fp.stop(node)
        last = fp.last_seq_of(node_log)
        _wait(lambda: fp.recorded_through(port, node_sid) >= last, 120, "the node's recording")
        seqs, gaps = fp.recorded(port, node_sid)
        assert gaps == [] and seqs == list(range(1, last + 1))
    finally:
        fp.stop(node)
        fp.stop(dash)


def _sweep_row(db: str, sweep: str) -> tuple[str, int]:
    """(the sweep's status, how many of its stored points failed)."""
    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            status = conn.execute(
                text("SELECT status FROM lab_sweeps WHERE id = :s"), {"s": sweep}
            ).scalar_one()
            failed = conn.execute(
                text("SELECT count(*) FROM lab_points WHERE sweep_id = :s AND error IS NOT NULL"),
                {"s": sweep},
            ).scalar_one()
            return str(status), int(failed)
    finally:
        engine.dispose()
