"""Browser-test fixtures: a real uvicorn server (`batchscope serve`, sim runner, no
workload) on a free loopback port in a subprocess, and Debian's headless Chromium
driven by Playwright. Skipped when /usr/bin/chromium or playwright is missing.
"""

from __future__ import annotations

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

playwright_api = pytest.importorskip("playwright.sync_api")
if not os.path.exists(CHROMIUM):
    pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)", allow_module_level=True)


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
    with playwright_api.sync_playwright() as pw:
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
    pg.wait_for_function("() => window.BS && BS.conn.snapshots > 0", timeout=15_000)
    try:
        yield pg
    finally:
        context.close()
