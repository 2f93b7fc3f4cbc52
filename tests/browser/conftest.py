"""Browser-test fixtures: a real uvicorn server (`batchscope serve`, sim runner, no
workload) on a free loopback port in a subprocess, and Debian's headless Chromium
driven by Playwright. Without /usr/bin/chromium or playwright every test here skips,
except under CI (env CI set), where each one fails (as the PostgreSQL tests do).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    Console,
    Server,
    migrate,
    start_server,
    stop_process,
)


def _missing() -> str | None:
    """Why these tests cannot run here, or None."""
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install playwright)"
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} is missing (apt-get install chromium; make browser)"
    return None


MISSING = _missing()


@pytest.fixture(scope="session", autouse=True)
def _needs_a_browser() -> None:
    if MISSING is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"browser tests cannot run in CI: {MISSING}")
    pytest.skip(MISSING)


@pytest.fixture(scope="session")
def migrated_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated SQLite file; each test's server starts from a copy of it."""
    db_file = tmp_path_factory.mktemp("db") / "template.sqlite"
    migrate(db_file)
    return db_file


@pytest.fixture
def server(tmp_path: Path, migrated_db: Path) -> Iterator[Server]:
    srv = start_server(tmp_path, migrated=migrated_db)
    try:
        yield srv
    finally:
        stop_process(srv.proc)


@pytest.fixture(scope="package")  # torn down before other packages use asyncio.run
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def console() -> Console:
    return Console()


@pytest.fixture
def page(browser: Any, server: Server, console: Console) -> Iterator[Any]:
    """A fresh browser context holding the control cookie, on the dashboard, connected."""
    context = browser.new_context(viewport={"width": 1500, "height": 1100})
    pg = console.watch(context.new_page(), server.url)
    pg.goto(server.url + f"/launch?token={server.token}")
    pg.wait_for_function("() => window.batchscope && batchscope.conn.snapshots > 0", timeout=15_000)
    try:
        yield pg
    finally:
        context.close()
