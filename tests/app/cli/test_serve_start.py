"""`batchscope serve` on first start and when it cannot start (real processes, real SQLite
files): a new SQLite database is created and migrated; an older one is migrated only with
--migrate; a port in use is the error before any launch URL; refusing leaves no file."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from app.db import migrate
from tests.conftest import ROOT, TOKEN, free_port
from tests.lifeline import die_with_us


def _serve(db: Path, port: int, *extra: str) -> subprocess.Popen[str]:
    cmd = [
        sys.executable, "-m", "app.cli", "serve", "--runner", "sim", "--workload", "none",
        "--port", str(port), "--token", TOKEN, "--database-url", f"sqlite:///{db}", *extra,
    ]  # fmt: skip
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=die_with_us(),
    )


def _until_healthy(proc: subprocess.Popen[str], port: int) -> list[str]:
    """Wait for /healthz 200, stop the server, return what it printed (stdout lines)."""
    deadline = time.monotonic() + 30
    try:
        while True:
            assert proc.poll() is None, proc.communicate()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "serve did not become healthy"
            time.sleep(0.1)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=15)
    return out.splitlines()


def test_first_start_creates_and_migrates_the_sqlite_database(tmp_path: Path) -> None:
    db = tmp_path / "new" / "dir" / "batchscope.db"
    port = free_port()
    lines = _until_healthy(_serve(db, port), port)
    assert lines[0].startswith("batchscope: created the SQLite database ")
    assert lines[1] == f"batchscope dashboard: http://127.0.0.1:{port}/"
    assert migrate.current_revision(f"sqlite:///{db}") == migrate.head_revision()


def test_an_older_database_is_migrated_only_with_migrate(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    url = f"sqlite:///{db}"
    migrate.upgrade(url)
    migrate.downgrade(url, "base")  # an older schema: the one revision before ours
    before = db.read_bytes()
    port = free_port()
    refused = _serve(db, port)
    out, err = refused.communicate(timeout=60)
    assert refused.returncode == 2 and out == ""
    assert "batchscope db upgrade --database-url " + url in err and "--migrate" in err
    assert db.read_bytes() == before
    lines = _until_healthy(_serve(db, port, "--migrate"), port)
    head = migrate.head_revision()
    assert lines[0] == f"batchscope: migrated the database {url} from revision (none) to {head}"
    assert migrate.current_revision(url) == migrate.head_revision()


def test_a_port_in_use_is_reported_before_the_launch_url(tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _serve(db, port)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == ""
    assert err.strip() == (
        f"batchscope: error: port {port} on 127.0.0.1 is already in use (another batchscope "
        "serve?): stop it, or pick another port with --port / BATCHSCOPE_PORT"
    )
    assert not db.exists()


def test_reading_a_database_that_does_not_exist_creates_nothing(tmp_path: Path) -> None:
    db = tmp_path / "missing.db"
    for args in (["sessions"], ["export", "s-1"]):
        r = subprocess.run(
            [sys.executable, "-m", "app.cli", *args, "--database-url", f"sqlite:///{db}"],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert r.returncode == 2 and f"there is no database at {db}" in r.stderr
        assert not db.exists()
