"""The pages laid out at 1280 × 800 and 800 px wide (issue 31, item 5), in Chromium: the
request table shows every value and header whole (none cut by an ellipsis); at 800 px no
page scrolls sideways, the top bar takes at most two lines and session names wrap between
words; the two first-difference tables of a compare never overlap, however long the plans.

One server (sim runner, Poisson workload) serves the module, from a database holding a busy
recording (prefix hits, waiting reasons, preemptions) and a pair of recordings whose plans
hold forty requests each.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.db.session import make_engine, make_sessionmaker
from app.live.hub import EventHub
from app.records.recorder import Recorder
from engine.config import CacheConfig, EngineConfig, SchedulerConfig
from engine.engine import Engine
from engine.request import SamplingParams
from engine.runner.sim import SimRunner
from tests.app.records.helpers import HubPublisher, open_sim_session, record_session
from tests.browser.harness import Console, Server, start_server, stop_process

BUSY, WIDE_A, WIDE_B = "s-busy", "s-wide-a", "s-wide-b"
LONG_NAME = "a recording with a long name that has to wrap between its words somewhere"
WIDTHS = (1280, 800)

# Cells of the request table (head and rows) whose text does not fit: [text, needs, has].
CUT_JS = """() => Array.from(
    document.querySelectorAll('#requests-head th, #requests-table td'), el => el)
  .filter(el => el.offsetParent !== null && el.scrollWidth > el.clientWidth)
  .map(el => [el.textContent, el.scrollWidth, el.clientWidth])"""
# The top bar's lines: its items' vertical centres, grouped.
HEADER_LINES_JS = """() => {
  const ys = Array.from(document.querySelector('header.topbar').children)
    .filter(el => el.offsetParent !== null && el.getBoundingClientRect().width > 0)
    .map(el => { const r = el.getBoundingClientRect(); return (r.top + r.bottom) / 2; })
    .sort((a, b) => a - b);
  let lines = 0, last = -1e9;
  for (const y of ys) { if (y - last > 8) lines++; last = y; }
  return lines;
}"""
# Words of a session name split over two lines: a word's range has more than one box.
SPLIT_WORDS_JS = """id => {
  const el = document.querySelector(`#sessions-rows tr[data-session="${id}"] .name-text`);
  const node = el.firstChild, text = node.data, split = [];
  for (const m of text.matchAll(/\\S+/g)) {
    const r = document.createRange();
    r.setStart(node, m.index);
    r.setEnd(node, m.index + m[0].length);
    if (r.getClientRects().length > 1) split.push(m[0]);
  }
  return split;
}"""


def record_wide(sessions: Any, sid: str, max_num_seqs: int) -> None:
    """Forty requests arriving together: every step plans up to `max_num_seqs` of them."""
    hub = EventHub()
    recorder = Recorder(hub, sessions)
    config = EngineConfig(
        SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=max_num_seqs, max_model_len=64),
        CacheConfig(block_size=8, num_gpu_blocks=400),
    ).validate()
    runner = SimRunner()
    open_sim_session(hub, sid, sid, config, runner)
    engine = Engine(config, runner, HubPublisher(hub, sid))
    for i in range(40):
        engine.add_request(f"request-{i:03d}", [5 + i] * 8, SamplingParams(max_tokens=6))
    while engine.has_unfinished_requests():
        engine.step()
    hub.close_session(sid)
    asyncio.run(recorder.flush())
    assert recorder.failures == 0, recorder.last_error


@pytest.fixture(scope="module")
def layout_server(tmp_path_factory: pytest.TempPathFactory, migrated_db: Path) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("layout")
    db_file = tmp / "recorded.sqlite"
    shutil.copyfile(migrated_db, db_file)
    engine = make_engine(f"sqlite:///{db_file}")

    def write() -> None:  # in a thread: Playwright's event loop runs in this one
        sessions = make_sessionmaker(engine)
        record_session(sessions, BUSY, steps=300, seed=3)
        record_wide(sessions, WIDE_A, max_num_seqs=40)
        record_wide(sessions, WIDE_B, max_num_seqs=24)

    worker = threading.Thread(target=write)
    worker.start()
    worker.join()
    engine.dispose()
    srv = start_server(tmp, migrated=db_file, workload="poisson")
    try:
        resp = srv.api("PATCH", f"/api/sessions/{BUSY}", json={"name": LONG_NAME})
        assert resp.status_code == 200, resp.text
        yield srv
    finally:
        stop_process(srv.proc)


@pytest.fixture
def context_at(browser: Any, layout_server: Server) -> Iterator[Any]:
    """Opens a browser context `width` px wide (800 high) holding the control cookie."""
    made: list[Any] = []

    def make(width: int) -> Any:
        ctx = browser.new_context(viewport={"width": width, "height": 800})
        made.append(ctx)
        ctx.new_page().goto(layout_server.url + f"/launch?token={layout_server.token}")
        return ctx

    try:
        yield make
    finally:
        for ctx in made:
            ctx.close()


def a_waiting_step(server: Server) -> int:
    """A step of the busy recording with requests waiting, one with a prefix hit done."""
    for step in range(60, 300, 10):
        resp = server.api(
            "GET", f"/api/sessions/{BUSY}/requests", params={"step": step, "status": "waiting"}
        )
        if int(resp.headers["x-total-count"]) >= 2:
            return step
    raise AssertionError("no step of the busy recording has requests waiting")


def page_scrolls_sideways(page: Any) -> bool:
    return bool(page.evaluate("() => document.scrollingElement.scrollWidth > innerWidth"))


@pytest.mark.parametrize("width", WIDTHS)
def test_the_request_table_shows_every_value_and_header_whole(
    context_at: Any, layout_server: Server, console: Console, width: int
) -> None:
    step = a_waiting_step(layout_server)
    page = console.watch(context_at(width).new_page(), layout_server.url)
    # Live: running and finished requests of the Poisson workload, with the abort buttons.
    page.goto(layout_server.url + "/")
    page.wait_for_function("() => batchscope.conn.snapshots > 0")
    page.locator('#requests-table tr[data-status="finished"]').first.wait_for(timeout=30_000)
    page.locator("#requests-table tr[data-req] button.abort").first.wait_for(timeout=30_000)
    assert page.evaluate(CUT_JS) == []
    # Replay at a step with requests waiting (their reasons) and prefix hits.
    page.goto(layout_server.url + f"/?session={BUSY}&step={step}")
    page.wait_for_function(
        f"() => batchscope.conn.snapshots > 0 && batchscope.model.step === {step}"
    )
    waiting = page.locator('#requests-table tr[data-status="waiting"] td.reason')
    waiting.first.wait_for()
    assert waiting.first.get_attribute("title").startswith(("waits:", "behind"))
    page.locator("#requests-table td.num", has_text="(hit ").first.wait_for()
    assert page.evaluate(CUT_JS) == []
    assert not page_scrolls_sideways(page)
    panel_scrolls = page.evaluate(
        "() => { const p = document.getElementById('requests-panel');"
        " return p.scrollWidth > p.clientWidth; }"
    )
    if width >= 1280:  # the whole table in view; narrower, its panel scrolls sideways
        assert not panel_scrolls
    assert console.errors == []


def test_no_page_scrolls_sideways_at_800_px(
    context_at: Any, layout_server: Server, console: Console
) -> None:
    page = console.watch(context_at(800).new_page(), layout_server.url)
    pages = {
        "/": "() => batchscope.conn.snapshots > 0",
        "/sessions": "() => document.querySelector('#sessions-rows tr[data-session]') !== null",
        "/nodes": "() => document.querySelector('#nodes-table tr[data-node]') !== null",
        f"/?session={BUSY}": "() => batchscope.conn.snapshots > 0",
        f"/compare?a={WIDE_A}&b={WIDE_B}": "() => document.body.dataset.drawn === 'yes'",
    }
    for path, ready in pages.items():
        page.goto(layout_server.url + path)
        page.wait_for_function(ready, timeout=30_000)
        time.sleep(0.5)  # the panels that htmx loads after the page
        assert not page_scrolls_sideways(page), (
            path,
            page.evaluate("() => document.scrollingElement.scrollWidth"),
        )
        assert page.evaluate(HEADER_LINES_JS) <= 2, path
    page.goto(layout_server.url + "/sessions")
    page.locator(f'#sessions-rows tr[data-session="{BUSY}"]').wait_for()
    assert page.evaluate(SPLIT_WORDS_JS, BUSY) == []
    # The whole sessions table is in view: its actions too, nothing behind a sideways scroll.
    assert page.evaluate(
        "() => { const t = document.getElementById('sessions-table');"
        " return t.getBoundingClientRect().right <= t.parentElement.getBoundingClientRect().right"
        " && t.parentElement.scrollWidth <= t.parentElement.clientWidth; }"
    )
    assert console.errors == []


@pytest.mark.parametrize("width", WIDTHS)
def test_the_first_difference_tables_never_overlap(
    context_at: Any, layout_server: Server, console: Console, width: int
) -> None:
    page = console.watch(context_at(width).new_page(), layout_server.url)
    page.goto(layout_server.url + f"/compare?a={WIDE_A}&b={WIDE_B}")
    page.locator("#diff-steps-b tr.first-diff").wait_for()
    plan = page.locator("#diff-steps-a tr.first-diff td.mono").first.inner_text()
    assert plan.count("request-") >= 24  # a long plan
    a = page.locator("#diff-steps-a").bounding_box()
    b = page.locator("#diff-steps-b").bounding_box()
    apart = (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )
    assert apart, (a, b)
    for box in (a, b):
        assert box["x"] >= 0 and box["x"] + box["width"] <= width, box
    assert not page_scrolls_sideways(page)
    assert console.errors == []
