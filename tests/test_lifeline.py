"""tests.lifeline: a child dies when the process that started it is SIGKILLed (no teardown
runs), as a killed test run's servers must; and a run started in the background (SIGINT
ignored) still passes Ctrl-C on to what it starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

STARTER = """
import subprocess, sys, time
from tests.lifeline import die_with_us
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         preexec_fn=die_with_us())
print(child.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie waits for init to reap it: gone
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
def test_a_child_dies_with_the_process_that_started_it() -> None:
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER], cwd=ROOT, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert starter.stdout is not None
    child = int(starter.stdout.readline())
    try:
        assert _alive(child)
        starter.send_signal(signal.SIGKILL)
        starter.wait(30)
        deadline = time.monotonic() + 30
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the child outlived its starter"
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


IGNORING = """
import signal, subprocess, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a run started with nohup or `&` inherits it
from tests.lifeline import take_ctrl_c
take_ctrl_c()
probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
print(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout)
"""


def test_a_run_started_in_the_background_still_passes_ctrl_c_on() -> None:
    out = subprocess.run(
        [sys.executable, "-c", IGNORING], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert out.stdout.strip() == "True", out.stdout + out.stderr
