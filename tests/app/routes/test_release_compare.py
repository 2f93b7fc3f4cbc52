"""One trace under two vLLM releases, compared (issue 20 item 5) over a real server: the
pair is recorded (POST /api/compare/releases), the first step whose plans differ is found
(GET /api/compare/first-difference) with the release change that explains it, and the
compare page marks that step. The shipped `priority` and `async_placeholders` scenarios
decide differently under 0.20 and 0.33 (tools/compare_scenario.py against vLLM itself)."""

from __future__ import annotations

from typing import Any

import httpx
from bs4 import BeautifulSoup

from tests.conftest import LiveServer


def _pair(c: httpx.Client, **body: Any) -> dict[str, Any]:
    r = c.post("/api/compare/releases", json=body, timeout=120)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    assert out["href"] == f"/compare?a={out['a']}&b={out['b']}"
    return out


def _difference(c: httpx.Client, a: str, b: str) -> dict[str, Any]:
    r = c.get("/api/compare/first-difference", params={"a": a, "b": b}, timeout=120)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def test_priority_differs_where_self_preemption_goes_on(live_server: LiveServer) -> None:
    with live_server.client() as c:
        pair = _pair(c, scenario="priority")
        for side, release in (("a", "0.20"), ("b", "0.33")):
            meta = c.get(f"/api/sessions/{pair[side]}").json()
            assert meta["config"]["vllm_version"] == release and meta["steps"] > 0
        fd = _difference(c, pair["a"], pair["b"])
        assert fd["a"]["vllm_version"] == "0.20" and fd["b"]["vllm_version"] == "0.33"
        assert fd["step"] == 25 and "scheduled" in fd["fields"]
        assert fd["explained_by"] == ["priority_self_preemption_continues"]
        flags = {ch["flag"]: ch for ch in fd["changes"]}
        assert flags["priority_self_preemption_continues"]["explains"] is True
        assert flags["lone_request_uncapped"]["explains"] is False
        assert flags["prefix_stats_at_admission"]["kind"] == "stats"
        # Each side's steps around it, the differing step's plans not equal.
        at = {side: next(r for r in fd["rows"][side] if r["step"] == 25) for side in "ab"}
        assert at["a"]["plan"] != at["b"]["plan"]
        assert [r["step"] for r in fd["rows"]["a"]] == list(range(22, 29))
        # The page marks it in both step tables and names the change.
        page = BeautifulSoup(c.get(pair["href"]).text, "html.parser")
        assert page.select_one("#first-diff")["data-step"] == "25"
        for side in "ab":
            row = page.select_one(f"#diff-steps-{side} tr.first-diff")
            assert row is not None and row["data-step"] == "25"
        explains = page.select("#release-changes tr.explains")
        assert [tr["data-flag"] for tr in explains] == ["priority_self_preemption_continues"]


def test_async_placeholders_differs_at_once_by_the_lone_request(live_server: LiveServer) -> None:
    with live_server.client() as c:
        pair = _pair(c, scenario="async_placeholders", a="0.33", b="0.20")
        fd = _difference(c, pair["a"], pair["b"])
        assert fd["a"]["vllm_version"] == "0.33" and fd["b"]["vllm_version"] == "0.20"
        assert fd["step"] == 0 and fd["explained_by"] == ["lone_request_uncapped"]
        # A recording's arrivals re-run under both releases: the same pair of sessions
        # compared (the trace run again from its arrivals, on the re-run's clock).
        again = _pair(c, session=pair["a"])
        fd2 = _difference(c, again["a"], again["b"])
        assert fd2["step"] is not None and fd2["explained_by"] == ["lone_request_uncapped"]
        assert fd2["explain_note"] == ""
        # Releases in between: 0.30 still caps the lone request, 0.31 does not, and the
        # change between them is the only one listed.
        pair = _pair(c, scenario="async_placeholders", a="0.30", b="0.31")
        fd = _difference(c, pair["a"], pair["b"])
        assert (fd["a"]["vllm_version"], fd["b"]["vllm_version"]) == ("0.30", "0.31")
        assert fd["step"] == 0 and fd["explained_by"] == ["lone_request_uncapped"]
        assert {ch["flag"] for ch in fd["changes"]} == {
            "lone_request_uncapped",
            "max_num_active_seqs",
            "long_prefill_token_threshold_adaptive",
        }


def test_alike_runs_and_refusals(live_server: LiveServer) -> None:
    with live_server.client() as c:
        pair = _pair(c, scenario="seed", a="0.33", b="0.33")
        fd = _difference(c, pair["a"], pair["b"])
        assert fd["step"] is None and fd["changes"] == [] and fd["fields"] == []
        page = BeautifulSoup(c.get(pair["href"]).text, "html.parser")
        assert page.select_one("#no-diff") is not None
        r = c.post("/api/compare/releases", json={})
        assert r.status_code == 422 and "session" in r.json()["detail"]
        r = c.post("/api/compare/releases", json={"scenario": "seed", "session": pair["a"]})
        assert r.status_code == 422
        assert c.post("/api/compare/releases", json={"scenario": "nope"}).status_code == 404
        assert c.post("/api/compare/releases", json={"session": "nope"}).status_code == 404
        r = c.post("/api/compare/releases", json={"scenario": "seed", "a": "0.19"})
        assert r.status_code == 422 and r.json()["errors"][0]["loc"] == ["body", "a"]
        r = c.get("/api/compare/first-difference", params={"a": pair["a"], "b": "nope"})
        assert r.status_code == 404
    with live_server.client(token=False) as c:
        assert c.post("/api/compare/releases", json={"scenario": "seed"}).status_code == 401
