"""`batchscope engine --push` with a token the dashboard refuses stops at once with a clear
error and exit code 2 (a wrong token never becomes right by retrying), instead of saying
"dashboard unreachable ... buffering" forever."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT, start_server
from tests.lifeline import die_with_us


def test_a_refused_token_is_a_clear_error_and_exit_code_2() -> None:
    live, server, thread = start_server(engine=False)
    try:
        cmd = [
            sys.executable, "-m", "app.cli", "engine", "--push", live.ws_url + "/ws/ingest",
            "--token", "not-the-token", "--runner", "sim", "--node", "n1",
        ]  # fmt: skip
        done = subprocess.run(
            cmd,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=die_with_us(),
        )
    finally:
        server.should_exit = True
        thread.join(10)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "refused the token (HTTP 403)" in done.stderr
    assert "--token" in done.stderr
    assert "buffering" not in done.stderr + done.stdout
