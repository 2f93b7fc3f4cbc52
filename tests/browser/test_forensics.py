"""Request forensics in the browser (issue 14): clicking a request on the timeline, in the
table or on the KV map opens its whole life as the server read it from the recording; a
deep link opens the same view in replay; the keyboard drives live and replay."""

from __future__ import annotations

import time
from typing import Any

from engine.waiting import waiting_text
from tests.browser.harness import Console, Server

WAITING_CASES: list[tuple[str, dict[str, Any]]] = [
    ("policy_order", {"head": "r1", "policy": "priority"}),
    ("kv_blocks", {"blocks_used": 9, "blocks_usable": 10, "blocks_free": 1, "blocks_needed": 3}),
    ("token_budget", {"padded_tokens": 5, "budget_left": 2}),
    (
        "token_budget",
        {
            "budget_used": 8,
            "budget_max": 8,
            "num_decodes": 2,
            "largest_chunk_req": "r2",
            "largest_chunk_tokens": 6,
            "num_prefill_chunks": 2,
        },
    ),
    ("max_num_seqs", {"max_num_seqs": 4}),
    ("max_num_active_seqs", {"max_num_active_seqs": 2, "num_running": 2, "max_num_seqs": 4}),
    ("kv_watermark", {"blocks_free": 3, "watermark_blocks": 2, "blocks_needed": 2}),
    ("prefill_throttled", {"until_step": 12, "prefill_schedule_interval": 4}),
    ("prefill_throttled", {"throttled_by_coordinator": True}),
    ("no_chunking_fit", {"tokens_needed": 40, "budget_left": 8}),
    ("preemption_this_step", {"num_preempted": 2}),
    ("static_batch", {"batch_size": 3}),
    ("paused", {}),
    ("remote_kv", {}),
    ("structured_output", {}),
    ("streaming_input", {}),
    ("lora_limit", {}),
    ("output_in_flight", {}),
    ("something_new", {}),
]

PANEL_WAITS_JS = """() => Array.from(document.querySelectorAll('#life-waits tbody tr'),
    tr => [+tr.dataset.from, +tr.dataset.to, tr.dataset.reason, tr.cells[2].textContent])"""
PANEL_PREFILLS_JS = """() => Array.from(
    document.querySelectorAll('#life-scheduled tbody tr[data-phase=prefill]'),
    tr => [+tr.dataset.from, +tr.dataset.n])"""


def run_kv_pressure(server: Server) -> tuple[str, dict[str, Any]]:
    """Load the kv_pressure scenario; wait until it finished and is recorded."""
    sid: str = server.api("POST", "/api/scenarios/kv_pressure/load").json()["session"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = server.api("GET", "/api/state").json()
        meta = server.api("GET", f"/api/sessions/{sid}")
        if (
            state["session"] == sid
            and all(r["status"] == "FINISHED" for r in state["requests"])
            and meta.status_code == 200
            and meta.json()["steps"] == state["step"] + 1
        ):
            return sid, state
        time.sleep(0.1)
    raise AssertionError("kv_pressure did not finish")


def shown_kv_pressure(page: Any, server: Server) -> tuple[str, dict[str, Any]]:
    """run_kv_pressure, then wait until the live page shows every request finished."""
    sid, state = run_kv_pressure(server)
    page.wait_for_function(
        "sid => batchscope.model.session === sid && batchscope.model.order.every("
        "id => batchscope.model.reqs.get(id).status === 'FINISHED')",
        arg=sid,
    )
    return sid, state


def click_on_timeline(page: Any, req: str, step: int) -> None:
    page.wait_for_function("r => batchscope.timeline.view.last.ids.includes(r)", arg=req)
    pt = page.evaluate("([r, s]) => batchscope.timeline.view.pointOf(r, s)", [req, step])
    box = page.locator("#gantt canvas").bounding_box()
    page.mouse.click(box["x"] + pt["x"], box["y"] + pt["y"])


def test_a_click_opens_the_requests_life_as_the_server_read_it(
    page: Any, server: Server, console: Console
) -> None:
    sid, state = shown_kv_pressure(page, server)
    row = next(r for r in state["requests"] if r["num_preemptions"])
    req = row["req"]
    prefills = [[s[1], s[3]] for s in row["segments"] if s[0] == "prefill"]

    # The timeline: a click on its first prefill chunk.
    click_on_timeline(page, req, prefills[0][0])
    page.locator(f'#rq-body[data-req="{req}"]').wait_for()
    assert page.locator("#req-panel").is_visible()
    assert page.evaluate(PANEL_PREFILLS_JS) == prefills
    life = server.api("GET", f"/api/requests/{req}", params={"session": sid}).json()
    waits = [[w["from"], w["to"], w["reason"], w["text"]] for w in life["waits"]]
    assert page.evaluate(PANEL_WAITS_JS) == waits
    assert any("KV pool full (" in w[3] for w in waits)  # the reason, with numbers
    # The page words reasons exactly as the engine does (static/js/waiting.js).
    mirrored = page.evaluate(
        "([req, ws]) => ws.map(w => batchscope.waitingText(req, w.reason, w.detail))",
        [req, life["waits"]],
    )
    assert mirrored == [w["text"] for w in life["waits"]]
    # Every reason, those of later releases and vLLM-only gates included.
    cases = [[reason, detail] for reason, detail in WAITING_CASES]
    texts = page.evaluate("(cs) => cs.map(c => batchscope.waitingText('r9', c[0], c[1]))", cases)
    assert texts == [waiting_text("r9", reason, detail) for reason, detail in WAITING_CASES]
    preempted = [s[1] for s in row["segments"] if s[0] == "preempted"]
    steps = page.locator("#life-preemptions tbody tr").evaluate_all(
        "rows => rows.map(r => +r.dataset.step)"
    )
    assert steps == preempted
    assert f"req={req}" in page.url

    # The table: another request.
    other = next(r["req"] for r in state["requests"] if r["req"] != req)
    page.locator(f'#requests-table tr[data-req="{other}"]').click()
    page.locator(f'#rq-body[data-req="{other}"]').wait_for()

    # The KV map's history: at the step of the first chunk the request's blocks are
    # outlined, and a click on one of them opens its owner.
    page.evaluate(
        "s => { const r = document.getElementById('kv-scrub'); r.value = String(s);"
        " r.dispatchEvent(new Event('input')); }",
        prefills[0][0],
    )
    page.wait_for_function(
        "s => batchscope.kvGrid.hist && batchscope.kvGrid.hist.step === s", arg=prefills[0][0]
    )
    block = page.evaluate(
        "r => { const m = batchscope.kvGrid.hist.map;"
        " return m.findIndex(b => b && b[1] === r && b[0] !== 'free' && b[0] !== 'cached'); }",
        req,
    )
    assert block > 0
    cell = page.evaluate(
        "id => { const g = batchscope.kvGrid; return {x: ((id - 1) % g.cols + 0.5) * g.cell,"
        " y: (Math.floor((id - 1) / g.cols) + 0.5) * g.cell}; }",
        block,
    )
    # In the middle of the window, clear of the sticky header.
    page.locator("#kv-grid").evaluate("e => e.scrollIntoView({block: 'center'})")
    box = page.locator("#kv-grid").bounding_box()
    page.mouse.click(box["x"] + cell["x"], box["y"] + cell["y"])
    page.locator(f'#rq-body[data-req="{req}"]').wait_for()
    # The selection settles once the panel's life has loaded (the live map moves on).
    page.wait_for_function(
        "b => batchscope.kvGrid.sel && Array.from(batchscope.kvGrid.sel).includes(b)", arg=block
    )
    page.keyboard.press("Escape")
    page.locator("#req-panel").wait_for(state="hidden")
    assert console.errors == []
    assert console.foreign == []


def test_a_deep_link_opens_in_replay_and_the_keys_drive_it(
    page: Any, server: Server, console: Console
) -> None:
    sid, state = run_kv_pressure(server)
    req = next(r["req"] for r in state["requests"] if r["num_preemptions"])
    # Live: space pauses and resumes the engine.
    page.locator("#run-state[data-state=running]").wait_for()
    page.locator("body").press(" ")
    page.locator("#run-state[data-state=paused]").wait_for()
    page.locator("body").press(" ")
    page.locator("#run-state[data-state=running]").wait_for()

    page.goto(f"{server.url}/?session={sid}&req={req}&step=30")
    page.wait_for_function("() => batchscope.conn.snapshots > 0 && batchscope.model.step === 30")
    page.locator(f'#rq-body[data-req="{req}"][data-upto="30"]').wait_for()
    assert page.input_value("#rp-scrub") == "30"
    life = server.api("GET", f"/api/requests/{req}", params={"session": sid, "step": 30}).json()
    assert page.locator("#rq-status").text_content() == life["status"].lower()
    # ←/→ step the replay (the panel follows), space plays and pauses, / searches.
    page.locator("body").press("ArrowRight")
    page.wait_for_function("() => batchscope.model.step === 31")
    page.locator('#rq-body[data-upto="31"]').wait_for()
    assert "step=31" in page.url
    page.locator("body").press("ArrowLeft")
    page.wait_for_function("() => batchscope.model.step === 30")
    page.locator("body").press(" ")
    page.wait_for_function("() => batchscope.replay.playing && batchscope.model.step > 30")
    page.locator("body").press(" ")
    page.wait_for_function("() => !batchscope.replay.playing")
    page.locator("body").press("/")
    assert page.evaluate("() => document.activeElement.id") == "req-search"
    assert console.errors == []
