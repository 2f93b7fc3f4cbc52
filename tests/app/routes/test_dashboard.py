"""The dashboard page and its htmx panels, read with an HTML parser (not substrings)."""

from __future__ import annotations

import time
from urllib.parse import quote

from bs4 import BeautifulSoup

from protocol.codes import BlockState, Phase, RequestStatus, SegmentKind, WaitingReason
from tests.conftest import LiveServer


def soup(html: str) -> BeautifulSoup:
    return BeautifulSoup(html, "html.parser")


def test_dashboard_serves_vendored_assets_only(live_server: LiveServer) -> None:
    with live_server.client(token=False) as c:
        page = soup(c.get("/").text)
        scripts = [s["src"] for s in page.find_all("script", src=True)]
        assert "/static/vendor/htmx-2.0.11.min.js" in scripts
        # plotly is fetched by charts.js after the timeline's first paint
        assert page.find(id="charts")["data-plotly"] == "/static/vendor/plotly-4.1.1.min.js"
        scripts.append(page.find(id="charts")["data-plotly"])
        assert all(src.startswith("/static/") for src in scripts)
        for src in scripts:
            assert c.get(src).status_code == 200, src
        links = [link["href"] for link in page.find_all("link", href=True)]
        assert all(h.startswith(("/static/", "/api/", "data:")) for h in links), links
        assert page.find("meta", attrs={"name": "htmx-config"}) is not None


def test_dashboard_has_the_panels(live_server: LiveServer) -> None:
    with live_server.client() as c:
        page = soup(c.get("/").text)
    for panel_id in ("gantt", "charts", "kv-grid", "steps-table", "requests-table",
                     "req-filters", "req-panel", "stats-panel", "config-form", "inject-form",
                     "flash"):  # fmt: skip
        assert page.find(id=panel_id) is not None, panel_id
    table = page.find(id="steps-table")
    assert table.find("tfoot").find(class_="total-tokens") is not None
    names = {el["name"] for el in page.find(id="config-form").find_all(attrs={"name": True})}
    assert names == {"max_num_batched_tokens", "max_num_seqs", "long_prefill_token_threshold",
                     "enable_chunked_prefill", "scheduler_reserve_full_isl", "kv_block_limit",
                     "policy", "max_num_active_seqs", "watermark", "prefill_schedule_interval",
                     "long_prefill_token_threshold_adaptive", "cache_aware_admission_window",
                     "cache_aware_admission_threshold"}  # fmt: skip
    assert page.find(id="cfg-mnbt")["value"] == "256"
    # The session decides as vLLM 0.34 (the default): its later knobs are shown, enabled.
    for knob in ("max_num_active_seqs", "watermark", "prefill_schedule_interval",
                 "cache_aware_admission_window"):  # fmt: skip
        field = page.find(id=f"cfg-{knob}")
        assert not field.has_attr("hidden") and not field.has_attr("disabled"), knob
    assert page.find(id="cfg-prefill_schedule_interval")["value"] == "1"
    scenarios = [li["data-scenario"] for li in page.select("#scenarios li[data-scenario]")]
    assert "seed" in scenarios


def test_the_legends_and_filters_list_the_protocols_codes(live_server: LiveServer) -> None:
    with live_server.client(token=False) as c:
        page = soup(c.get("/").text)

    def swatches(label: str) -> list[str]:
        legend = page.find("ul", attrs={"aria-label": label})
        return [sw["class"][1].removeprefix("sw-") for sw in legend.select("li > .sw")]

    def options(name: str) -> list[str]:
        return [o["value"] for o in page.select(f'#req-filters [name="{name}"] option')]

    assert swatches("segment kinds")[: len(SegmentKind)] == list(SegmentKind)
    assert swatches("KV block states") == list(BlockState)
    assert options("reason") == ["", *WaitingReason]
    assert options("phase") == ["", *Phase]
    assert options("status") == [
        "",
        "running,waiting,preempted",
        *(s.lower() for s in RequestStatus),
    ]
    # socket.js opens the live socket before the stylesheet loads: an async module at the
    # top of <head> (it imports the hello's type from the generated protocol.js).
    early = page.find("script", src=lambda src: bool(src) and "/js/socket.js" in src)
    assert early["type"] == "module" and early.has_attr("async")
    head = page.find("head").find_all(["script", "link"])
    assert head.index(early) < head.index(page.find("link", rel="stylesheet"))


def test_controls_are_disabled_without_the_token(live_server: LiveServer) -> None:
    with live_server.client(token=False) as c:
        page = soup(c.get("/").text)
    assert page.select_one("#controls .readonly") is not None
    assert page.select_one("#controls fieldset").has_attr("disabled")
    assert page.select_one("#config-form fieldset").has_attr("disabled")
    with live_server.client() as c:
        page = soup(c.get("/").text)
    assert page.select_one("#controls .readonly") is None
    assert not page.select_one("#controls fieldset").has_attr("disabled")


def test_request_rows_and_stats_panel_follow_the_session(live_server: LiveServer) -> None:
    with live_server.client() as c:
        r = c.post("/api/requests", json={"prompt_len": 20, "max_tokens": 4, "count": 3})
        ids = r.json()["req_ids"]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            rows = c.get("/api/requests", params={"status": "finished"}).json()
            if len(rows) == 3:
                break
            time.sleep(0.05)
        assert sorted(row["req"] for row in rows) == sorted(ids)
        assert all(row["ttft"] is not None and row["e2e"] >= row["ttft"] for row in rows)
        stats = soup(c.get("/panels/stats").text)
        metrics = [tr["data-metric"] for tr in stats.select("#stats-table tr[data-metric]")]
        assert metrics == ["ttft", "itl", "queue", "e2e"]
        controls = soup(c.get("/panels/controls").text)
        assert controls.find(id="workload-form") is not None


def test_the_flash_fragment_escapes_user_text(live_server: LiveServer) -> None:
    evil = "<img src=x onerror=alert(1)>"
    with live_server.client() as c:
        r = c.post(f"/api/requests/{quote(evil)}/abort", headers={"HX-Request": "true"})
    fragment = soup(r.text)
    assert fragment.find("img") is None
    flash = fragment.find(class_="flash")
    assert "flash-error" in flash["class"]
    assert evil in flash.get_text()
    assert "&lt;img" in r.text
