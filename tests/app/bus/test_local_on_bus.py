"""A dashboard's own engine on the fleet bus (`serve --bus`, engine on): it is a node on
/fleet from its per-step summaries, on its own dashboard and on any other dashboard of the
fleet, while its session is still recorded once, over its link, by its own dashboard only."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.bus import fleet_procs as fp
from tests.conftest import TOKEN, free_port

AUTH = {"Authorization": f"Bearer {TOKEN}"}
OWN = "own-dash"


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A bus; a dashboard with its own sim engine; a --no-engine dashboard; own databases."""
    bus = fp.NatsServer(tmp_path / "js")
    procs: list[Any] = []
    ports = free_port(), free_port()
    try:
        procs.append(
            fp.dashboard(
                ports[0],
                f"sqlite:///{tmp_path}/own.db",
                bus.url,
                OWN,
                tmp_path / "own.log",
                env={"BATCHSCOPE_WORKLOAD_RATE": "20"},
                engine=True,
            )
        )
        procs.append(
            fp.dashboard(
                ports[1], f"sqlite:///{tmp_path}/other.db", bus.url, "other", tmp_path / "o.log"
            )
        )
        yield f"http://127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[1]}"
    finally:
        for proc in procs:
            fp.stop(proc)
        bus.stop()


def _row(base: str) -> dict[str, Any] | None:
    page = httpx.get(f"{base}/api/fleet", timeout=10).json()
    return next((n for n in page["nodes"] if n["node"] == OWN), None)


def test_own_engine_is_a_fleet_node_recorded_once(two: tuple[str, str]) -> None:
    own, other = two
    for base in (own, other):
        fp.wait_for(lambda b=base: (_row(b) or {}).get("step", 0) > 20, 120, f"{base} fleet")
    row = _row(own)
    assert row is not None and row["kv_total"] > 0 and row["steps_per_s"] > 0
    session = row["session"]
    assert (_row(other) or {})["session"] == session

    # On its own dashboard the node is the live session, fed over the link, not the bus.
    status = httpx.get(f"{own}/api/fleet", timeout=10).json()["bus"]
    assert status["frames"] == 0 and status["refused"] == 0
    r = httpx.get(f"{own}/fleet/{OWN}", timeout=10, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/"

    # Recorded exactly once: one session row, every seq once, no gap.
    port = int(own.rsplit(":", 1)[1])
    fp.wait_for(lambda: fp.recorded_through(port, session) > 50, 90, "the recording")
    listed = httpx.get(f"{own}/api/sessions", timeout=10).json()
    assert Counter(s["id"] for s in listed)[session] == 1
    last = fp.recorded_through(port, session)
    seqs, gaps = fp.recorded(port, session)
    assert len(seqs) == len(set(seqs)) and gaps == []
    assert fp.covered(seqs, gaps, last) == []
    views = [v for v in httpx.get(f"{own}/api/nodes", timeout=10).json() if v["session"] == session]
    assert len(views) <= 1

    # Another dashboard shows it from summaries only; it records none of it (its own
    # database), and asking for its full detail says where that is.
    assert httpx.get(f"{other}/api/nodes", timeout=10).json() == []
    assert httpx.get(f"{other}/api/sessions/{session}", timeout=10).status_code == 404
    r = httpx.post(f"{other}/api/fleet/{OWN}/detail", headers=AUTH, timeout=30)
    assert r.status_code == 422 and "own engine" in r.json()["detail"]

    # A new session of the engine (here: the same knobs) is the node's new session.
    r = httpx.post(f"{own}/api/engine/session", json={}, headers=AUTH, timeout=60)
    assert r.status_code == 200, r.text
    new = r.json()["session"]
    assert new != session
    for base in (own, other):
        fp.wait_for(lambda b=base: (_row(b) or {}).get("session") == new, 60, f"{base} switch")
    fp.wait_for(lambda: fp.recorded_through(port, new) > 10, 90, "the new recording")
    listed = httpx.get(f"{own}/api/sessions", timeout=10).json()
    counts = Counter(s["id"] for s in listed)
    assert counts[session] == 1 and counts[new] == 1
