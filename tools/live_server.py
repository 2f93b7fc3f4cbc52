"""Start a throwaway `batchscope serve` (migrated SQLite in a temp dir) and launch Debian's
headless Chromium: the harness shared by tools/screenshot.py and tools/ui_bench.py.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.lifeline import die_with_us

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--no-first-run"]  # fmt: skip


@dataclass
class LiveServer:
    url: str
    token: str

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}"}
        resp = httpx.request(method, self.url + path, headers=headers, timeout=15, **kwargs)
        if resp.status_code >= 400:
            raise RuntimeError(f"{method} {path}: {resp.status_code} {resp.text}")
        return resp


def recorder_lag(srv: LiveServer) -> int:
    """Frames the server's recorder has not written yet (/healthz answers 503 while the
    lag is long, with the same body)."""
    body = httpx.get(srv.url + "/healthz", timeout=15).json()
    lag: int = body["checks"]["recorder"]["info"]["lag"]
    return lag


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def live_server(
    workload: str = "poisson", runner: str = "sim", env: dict[str, str] | None = None
) -> Iterator[LiveServer]:
    """`env`: settings for the server (BATCHSCOPE_* variables)."""
    with tempfile.TemporaryDirectory(prefix="batchscope-") as tmp:
        db_url = f"sqlite:///{tmp}/db.sqlite"
        cli = [sys.executable, "-m", "app.cli"]
        subprocess.run([*cli, "db", "upgrade", "--database-url", db_url], cwd=ROOT,
                       check=True, capture_output=True, timeout=120)  # fmt: skip
        port, token = free_port(), secrets.token_urlsafe(12)
        log = Path(tmp) / "server.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*cli, "serve", "--port", str(port), "--runner", runner, "--workload", workload,
                 "--database-url", db_url, f"--token={token}"],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                preexec_fn=die_with_us(),
            )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("server did not start:\n" + log.read_text())
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                        break
                time.sleep(0.1)
            yield LiveServer(url, token)
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} is missing: apt-get install -y chromium")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
