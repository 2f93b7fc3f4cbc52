"""The engine loop's mode on the dashboard (issue 10's "seeing it"): the async scenario shows
the async badge, the batch queue, placeholders and the extra step avoided at max_tokens;
the speculative-decoding scenario shows its badge, draft marks (accepted vs rejected) and
the drafts chart. Both replayed from the start, so every frame goes through the fold."""

from __future__ import annotations

import time
from typing import Any

from tests.browser.harness import Console, Server


def recorded(server: Server, scenario: str) -> str:
    sid: str = server.api("POST", f"/api/scenarios/{scenario}/load").json()["session"]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        state = server.api("GET", "/api/state").json()
        meta = server.api("GET", f"/api/sessions/{sid}")
        done = state["requests"] and all(r["status"] == "FINISHED" for r in state["requests"])
        if done and meta.status_code == 200 and meta.json()["steps"] == state["step"] + 1:
            return sid
        time.sleep(0.1)
    raise AssertionError(f"{scenario} did not finish")


def replay_from_the_start(page: Any, server: Server, sid: str) -> None:
    page.goto(f"{server.url}/?session={sid}&step=0")
    page.wait_for_function("() => batchscope.conn.snapshots > 0 && batchscope.model.step === 0")
    page.click("#rp-play")
    page.wait_for_function(
        "() => batchscope.replay.steps > 1 && batchscope.model.step === batchscope.replay.steps - 1"
    )


def test_async_and_spec_modes_show(page: Any, server: Server, console: Console) -> None:
    sid = recorded(server, "async_placeholders")
    replay_from_the_start(page, server, sid)
    assert page.locator("#mode-sched").text_content() == "async"
    assert page.locator("#mode-release").text_content() == "vLLM 0.20"  # the scenario's
    assert page.evaluate("() => document.body.classList.contains('mode-async')")
    page.locator("#hdr-batches").wait_for(state="visible")
    # The table draws its rows throttled, after the model: a loaded box shows them late.
    page.wait_for_function("() => document.querySelectorAll('#steps-table td.notes').length >= 3")
    notes = page.locator("#steps-table td.notes").all_text_contents()
    assert notes[:3] == ["output in flight", "applied step 0", "applied step 1"]
    # A's in-flight tokens reach max_tokens (3): step 5 is not scheduled for it.
    marks = page.evaluate("() => batchscope.model.reqs.get('A').marks")
    assert [m[1] for m in marks] == ["skip"] and marks[0][0] == 5
    page.locator("#requests-head th.mode-async").wait_for(state="visible")
    page.locator('#requests-table tr[data-req="A"]').click()
    page.locator('#rq-body[data-req="A"]').wait_for()
    batches = page.locator("#life-outputs tbody tr.late-batch").count()
    assert batches == 3  # each of A's tokens applied one step after its batch

    sid = recorded(server, "spec_decode")
    replay_from_the_start(page, server, sid)
    assert page.locator("#mode-spec").text_content() == "spec K=4"
    assert page.locator("#mode-sched").text_content() == "sync"
    drafts = page.evaluate(
        "() => batchscope.model.order.flatMap(id => batchscope.model.reqs.get(id).marks"
        ".filter(m => m[1] === 'draft'))"
    )
    assert drafts and all(0 <= m[3] <= m[2] <= 4 for m in drafts)
    assert any(m[3] < m[2] for m in drafts) and any(m[3] > 0 for m in drafts)
    page.locator("#timeline li.mode-spec").first.wait_for(
        state="visible"
    )  # legend: accepted/rejected
    rates_js = (
        "() => { const el = document.getElementById('charts');"
        " const t = el.layout && el.layout.yaxis5 && el.data.find(t => t.name === 'acceptance %');"
        " return t ? t.y.filter(y => y !== null) : []; }"
    )
    page.wait_for_function(f"() => ({rates_js})().length > 0")  # the charts draw throttled
    rates = page.evaluate(rates_js)
    assert all(0 <= y <= 100 for y in rates)
    assert console.errors == []


def open_engine_panel(page: Any, session: str) -> None:
    """Wait for the controls panel to show `session`'s engine (it is swapped in when the
    live session changes), then open its engine section."""
    page.wait_for_function(
        f"() => (document.querySelector('#engine-panel') || {{}}).textContent"
        f"?.includes('{session}')"
    )
    page.evaluate("() => { document.querySelector('#engine-panel').open = true; }")


def test_new_session_in_async_mode_and_an_engine_restart(
    page: Any, server: Server, console: Console
) -> None:
    """The controls' engine panel: a new session with async scheduling chosen on the page,
    then a restart of the engine process; the page follows both new sessions, and shows the
    requested restart as no crash: once the fresh process runs, the panel names it, with
    no exit warning left."""
    page.goto(server.url + "/")
    page.wait_for_function("() => batchscope.conn.snapshots > 0 && !!batchscope.model.session")
    first = page.evaluate("() => batchscope.model.session")
    open_engine_panel(page, first)
    page.select_option("#ns-async", "true")
    page.click("#btn-new-session")
    page.wait_for_function(
        f"() => batchscope.model.session && batchscope.model.session !== '{first}'"
    )
    page.wait_for_function("() => document.querySelector('#mode-sched').textContent === 'async'")
    assert server.api("GET", "/api/state").json()["config"]["async_scheduling"] is True
    second = page.evaluate("() => batchscope.model.session")
    pid = server.api("GET", "/api/engine").json()["pid"]
    open_engine_panel(page, second)
    page.click("#btn-restart-engine")
    page.wait_for_function(
        f"() => batchscope.model.session && batchscope.model.session !== '{second}'"
    )
    third = page.evaluate("() => batchscope.model.session")
    now = server.api("GET", "/api/engine").json()
    assert now["pid"] != pid and now["last_exit"]["requested"] is True
    open_engine_panel(page, third)
    assert f"Process {now['pid']}" in (page.locator("#engine-panel").text_content() or "")
    assert page.locator("#engine-exit").count() == 0
    assert page.locator("#engine-panel .warn").count() == 0
