"""Signals sent to a real `batchscope serve` process group (what a terminal's Ctrl-C and
systemd do): SIGINT and SIGTERM shut down in order and lose no frame a viewer saw; after
SIGKILL the next start marks the orphaned session ended and says what it covers."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator

import httpx
import pytest

from app.db.migrate import upgrade
from tests.app.process_group import serve, stop, watch
from tests.app.records.helpers import recorded
from tests.conftest import free_port


@pytest.fixture
def migrated(database_url: str) -> Iterator[str]:
    upgrade(database_url)
    yield database_url


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_group_signal_shuts_down_in_order_and_loses_nothing(migrated: str, sig: int) -> None:
    port = free_port()
    proc = serve(migrated, port)
    try:
        session, seen, _ = asyncio.run(watch(port, 3.0, kill=(proc.pid, sig)))
        proc.wait(60)
    finally:
        stop(proc, signal.SIGKILL)
    seqs, rec = recorded(migrated, session)
    assert seen > 100
    assert seqs == list(range(1, len(seqs) + 1)), "holes in the recording"
    assert len(seqs) >= seen, f"frames a viewer saw were lost: {seen - len(seqs)}"
    assert rec is not None and rec.ended_at is not None and rec.end_reason == "closed"


def _recorder(port: int) -> dict[str, int]:
    """The server's recorder as /healthz tells it (written, lag, ...)."""
    health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).json()
    info: dict[str, int] = health["checks"]["recorder"]["info"]
    return info


def _writing(port: int, seconds: float = 60.0) -> None:
    """Wait until the server's recorder has written frames (its writer process is up)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _recorder(port)["written"] > 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"the recorder wrote nothing in {seconds:.0f} s")


def test_sigkill_loses_a_bounded_tail_and_the_next_start_marks_the_orphan(migrated: str) -> None:
    port = free_port()
    proc = serve(migrated, port)
    try:
        # The tail is of a recorder at work: its writer process up (starting one can take
        # seconds on a loaded box, the frames meanwhile held, unwritten).
        _writing(port)
        at_kill: dict[str, int] = {}
        session, seen, _ = asyncio.run(
            watch(
                port,
                3.0,
                kill=(proc.pid, signal.SIGKILL),
                before_kill=lambda: at_kill.update(_recorder(port)),
            )
        )
        proc.wait(10)
    finally:
        stop(proc, signal.SIGKILL)
    time.sleep(1.0)  # the writer process, orphaned, finishes its batch and exits
    seqs, rec = recorded(migrated, session)
    assert seqs == list(range(1, len(seqs) + 1)), "holes in the recording"
    assert rec is not None and rec.ended_at is None
    # The tail lost is what the recorder had not written yet (a fraction of a second of
    # frames on a quiet box, seconds while a loaded one delays its writer): every frame it
    # had counted written just before the kill is there, and the session.
    assert at_kill["written"] > 0
    assert len(seqs) >= at_kill["written"], (seen, len(seqs), at_kill)
    again = serve(migrated, free_port(), rate=0.01)
    try:
        os.killpg(again.pid, signal.SIGINT)
        out, _ = again.communicate(timeout=60)
    finally:
        stop(again, signal.SIGKILL)
    assert f"session {session} was left open" in out and "covers steps" in out, out
    _, rec = recorded(migrated, session)
    assert rec is not None and rec.ended_at is not None and rec.end_reason == "orphaned"
