"""Two levels of detail over a real bus: every node's summary always (the fleet page and
its JSON twin), full frames only once someone opens the node or asks for an incident
window, from the node's flight recorder; what the recorder no longer held is a gap."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bs4 import BeautifulSoup

from protocol.bus import SUMMARY_FIELDS
from tests.app.bus import fleet_procs as fp
from tests.conftest import TOKEN, free_port

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[str, list[Any]]]:
    """A bus, a dashboard on it and three on-demand nodes (short flight recorders)."""
    bus = fp.NatsServer(tmp_path / "js")
    port = free_port()
    procs: list[Any] = []
    try:
        procs.append(
            fp.dashboard(port, f"sqlite:///{tmp_path}/a.db", bus.url, "fl", tmp_path / "d.log")
        )
        for i, rate in enumerate((30.0, 5.0, 10.0)):
            name = f"node-{i}"
            log = tmp_path / f"{name}.log"
            procs.append(fp.node(bus.url, name, log, "--flight-s", "3", rate=rate))
        yield f"http://127.0.0.1:{port}", procs
    finally:
        for proc in procs:
            fp.stop(proc)
        bus.stop()


def _fleet(base: str, **params: Any) -> dict[str, Any]:
    r = httpx.get(f"{base}/api/fleet", params=params, timeout=10)
    r.raise_for_status()
    out: dict[str, Any] = r.json()
    return out


def _node(base: str, name: str) -> dict[str, Any] | None:
    views = httpx.get(f"{base}/api/nodes", timeout=10).json()
    return next((v for v in views if v["node"] == name), None)


def test_summaries_always_detail_on_demand(fleet: tuple[str, list[Any]]) -> None:
    base, _ = fleet
    fp.wait_for(
        lambda: len([n for n in _fleet(base)["nodes"] if n["step"] > 20]) == 3, 90, "summaries"
    )
    page = _fleet(base)
    assert page["bus"]["connected"] and page["bus"]["nodes"] == 3
    assert page["bus"]["lag_p99_ms"] > 0
    row = page["nodes"][0]
    assert set(row) >= {"tokens_per_s", "waiting", "kv_pct", "preemptions", "stalls"}
    assert row["kv_total"] > 0 and row["steps_per_s"] > 0
    # Nobody opened a node: no full frames went over the bus.
    assert httpx.get(f"{base}/api/nodes", timeout=10).json() == []
    assert page["bus"]["frames"] == 0

    # Sorted on request, in the page as in its twin.
    by_tokens = _fleet(base, sort="tokens_per_s", desc="true")["nodes"]
    assert [n["tokens_per_s"] for n in by_tokens] == sorted(
        (n["tokens_per_s"] for n in by_tokens), reverse=True
    )
    assert httpx.get(f"{base}/api/fleet", params={"sort": "nope"}, timeout=10).status_code == 422
    html = httpx.get(f"{base}/fleet", params={"sort": "waiting", "desc": "true"}, timeout=10)
    soup = BeautifulSoup(html.text, "html.parser")
    rows = soup.select("#fleet-table tbody tr")
    assert sorted(r["data-node"] for r in rows) == ["node-0", "node-1", "node-2"]
    sorted_by = soup.select_one('th a[aria-sort="descending"]')
    assert sorted_by is not None and sorted_by.text == "waiting (queue)"
    link = rows[0].select_one("a.open")
    assert link is not None and str(link["href"]).startswith("/fleet/node-")

    # Opening a node streams its full detail, starting from its flight recorder: the
    # frames older than the recorder's 3 s are one marked gap.
    time.sleep(4)
    opened = httpx.get(f"{base}/fleet/node-0", timeout=30, follow_redirects=False)
    assert opened.status_code == 303 and opened.headers["location"].startswith("/")
    fp.wait_for(lambda: (_node(base, "node-0") or {}).get("frames", 0) > 100, 60, "detail")
    view = _node(base, "node-0")
    assert view is not None and view["gaps"] == 1 and view["missing"] > 0
    assert _node(base, "node-1") is None  # the others still send summaries only
    # Commands reach a bus node over its control subject and are answered.
    sid0 = view["session"]
    r = httpx.post(f"{base}/api/pause", params={"session": sid0}, headers=AUTH, timeout=30)
    assert r.status_code == 200 and r.json()["message"] == "paused", r.text
    r = httpx.post(f"{base}/api/resume", params={"session": sid0}, headers=AUTH, timeout=30)
    assert r.status_code == 200, r.text

    # An incident window: the last second of node-1, then nothing more.
    r = httpx.post(f"{base}/api/fleet/node-1/window", params={"seconds": 1}, headers=AUTH)
    assert r.status_code == 200, r.text
    reply = r.json()
    assert reply["from_seq"] > 1 and reply["last_seq"] >= reply["from_seq"]
    fp.wait_for(
        lambda: (_node(base, "node-1") or {}).get("last_seq", 0) >= reply["last_seq"],
        60,
        "the window",
    )
    port, sid = int(base.rsplit(":", 1)[1]), (_node(base, "node-1") or {})["session"]
    fp.wait_for(lambda: fp.recorded_through(port, sid) >= reply["last_seq"], 60, "recorded")
    seqs, gaps = fp.recorded(port, sid)
    assert gaps and gaps[0][0] == 1 and fp.covered(seqs, gaps, reply["last_seq"]) == []

    # Bad requests are refused with a message; a node nobody runs does not answer.
    assert httpx.post(f"{base}/api/fleet/node-1/window", params={"seconds": -1},
                      headers=AUTH).status_code == 422  # fmt: skip
    assert httpx.post(f"{base}/api/fleet/node-1/detail", timeout=10).status_code == 401
    r = httpx.post(f"{base}/api/fleet/nobody/detail", headers=AUTH, timeout=30)
    assert r.status_code == 503 and "nobody" in r.json()["detail"]


def test_summary_fields_are_documented() -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "fleet.md").read_text()
    for field in SUMMARY_FIELDS:
        assert f"`{field}`" in doc, field
