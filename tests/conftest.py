"""Shared fixtures: a real uvicorn server on a free loopback port."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from app.main import create_app
from app.settings import Settings
from tests.lifeline import die_with_us, take_ctrl_c

TOKEN = "test-token-123"
ROOT = Path(__file__).resolve().parents[1]
pytest_plugins = ["tests.file_order"]  # files run longest first


def pytest_configure(config: pytest.Config) -> None:
    take_ctrl_c()  # a run started in the background still tests Ctrl-C (tests/lifeline.py)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class LiveServer:
    url: str
    ws_url: str
    app: Any
    token: str

    def client(self, token: bool = True) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=10)


def start_server(**overrides: Any) -> tuple[LiveServer, uvicorn.Server, threading.Thread]:
    port = free_port()
    values: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": port,
        "runner": "sim",
        "workload": "none",
        "token": TOKEN,
        "database_url": "sqlite://",
    }
    values.update(overrides)
    app = create_app(Settings(**values))
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            ws="websockets-sansio",
            # Compression would be per client (no encode-once) and costs more CPU than the
            # loopback/LAN bytes it saves.
            ws_per_message_deflate=False,
            # The plain asyncio loop: this server runs in a non-main thread of pytest.
            loop="asyncio",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    live = LiveServer(f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}", app, TOKEN)
    return live, server, thread


def cli(*args: str, timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess[str]:
    """`python -m app.cli ARGS` from the repository root, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
    )


def wait_healthy(proc: subprocess.Popen[Any], url: str, seconds: float) -> bool:
    """Poll `url`/healthz until it answers 200 (True), or `proc` exits or time runs out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            return False
        time.sleep(0.1)
    return False


@contextlib.contextmanager
def server_process(database_url: str = "sqlite://", **env_settings: Any) -> Iterator[LiveServer]:
    """`batchscope serve` in its own process (its own GIL), configured by environment."""
    port = free_port()
    env = dict(os.environ)
    env.update({f"BATCHSCOPE_{k.upper()}": str(v) for k, v in env_settings.items()})
    cmd = [
        sys.executable,
        "-m",
        "app.cli",
        "serve",
        "--port",
        str(port),
        "--runner",
        "sim",
        "--workload",
        "none",
        "--token",
        TOKEN,
        "--database-url",
        database_url,
    ]
    proc = subprocess.Popen(
        cmd,
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=die_with_us(),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        if not wait_healthy(proc, url, 30):
            raise RuntimeError(
                "server did not start: " + (proc.stdout.read() if proc.stdout else "")
            )
        yield LiveServer(url, f"ws://127.0.0.1:{port}", None, TOKEN)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def live_server() -> Iterator[LiveServer]:
    live, server, thread = start_server()
    yield live
    server.should_exit = True
    thread.join(10)


PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def _pg_available() -> bool:
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN, connect_timeout=3):
            return True
    except Exception:
        return False


@contextlib.contextmanager
def fresh_pg_database() -> Iterator[str]:
    """A new, empty PostgreSQL database on the local server, dropped afterwards.
    Skips (with the reason) where no PostgreSQL runs; CI runs it (CI=true fails instead)."""
    if not _pg_available():
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not reachable on 127.0.0.1:5432 in CI")
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
    import psycopg

    name = "bs_test_" + uuid.uuid4().hex[:10]
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def terminate_backends(url: str, application_name: str | None = None) -> int:
    """A database outage made for real: the server terminates the backends of the database
    at `url` (only those of `application_name` when given). Returns how many."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid() "
            "AND (%s::text IS NULL OR application_name = %s)",
            (name, application_name, application_name),
        ).fetchall()
    return len(rows)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Both backends for real: a SQLite file, and a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'rec.db'}"
        return
    with fresh_pg_database() as url:
        yield url


@pytest.fixture
def pg_url() -> Iterator[str]:
    with fresh_pg_database() as url:
        yield url


@pytest.fixture(scope="session")
def node_js() -> str:
    """Node (what `make js-lint` runs on), for tests that run the page's modules outside
    a browser. Skips where it is missing; CI has it (CI=true fails instead)."""
    found = shutil.which("node")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("node is not installed in CI (make js-lint needs it too)")
        pytest.skip("node (make js-lint's) is not installed")
    return found
