"""`make run` serves where the environment says: `BATCHSCOPE_PORT=N make run` (the app's own
variable, as every other setting) serves on N, as `make run PORT=N` does, not on 8000."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, free_port, wait_healthy
from tests.lifeline import die_with_us


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_batchscope_port_in_the_environment_is_the_port_make_run_serves_on(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "BATCHSCOPE_PORT": str(port),
        "BATCHSCOPE_RUNNER": "sim",
        "BATCHSCOPE_WORKLOAD": "none",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'run.db'}",
    }
    env.pop("PORT", None)
    env.pop("MAKEFLAGS", None)
    # -o: the venv is the one this test runs in; `make run` must not reinstall it.
    cmd = ["make", "--no-print-directory", "-o", ".venv/.installed", "run"]
    with (tmp_path / "run.log").open("w") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # make and the server it starts: one group to stop
            preexec_fn=die_with_us(),
        )
    try:
        served = wait_healthy(proc, f"http://127.0.0.1:{port}", 60)
        assert served, (tmp_path / "run.log").read_text()[-2000:]
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
