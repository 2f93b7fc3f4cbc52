"""A process started against a bus that is not there says so and stops (nats-py alone
would retry its first connection forever)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[3]


def test_an_engine_whose_bus_never_answers_exits_with_the_reason(tmp_path: Path) -> None:
    url = f"nats://127.0.0.1:{free_port()}"  # nothing listens there
    cmd = [sys.executable, "-m", "app.cli", "engine", "--runner", "sim", "--bus", url]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"the bus at {url} did not answer" in done.stderr
    assert "Traceback" not in done.stderr
