"""One trace under two vLLM releases in compare, in a real Chromium: the scenario list's
"0.20 ↔ 0.33" button records the pair and opens the comparison, where the first step the
releases decide differently is marked in both timelines and both step tables, with the
release change that explains it."""

from __future__ import annotations

from typing import Any

from tests.browser.harness import Console, Server


def test_the_first_difference_is_marked_on_both_sides(
    page: Any, server: Server, console: Console
) -> None:
    page.click('#scenarios li[data-scenario="priority"] [data-release-pair]')
    page.wait_for_url("**/compare?a=*", timeout=60_000)
    page.wait_for_selector("body[data-drawn=yes]", timeout=30_000)
    for side in ("a", "b"):
        gantt = page.locator(f"#gantt-{side}")
        assert gantt.get_attribute("data-diff-step") == "25"
        assert int(gantt.get_attribute("data-drawn") or 0) > 0
        row = page.locator(f"#diff-steps-{side} tr.first-diff")
        assert row.is_visible() and row.get_attribute("data-step") == "25"
        # Highlighted: its cells are painted unlike an ordinary row's.
        colors = page.evaluate(
            """side => [...document.querySelectorAll('#diff-steps-' + side + ' tbody tr')]
                .map(tr => [tr.dataset.step, getComputedStyle(tr.cells[0]).backgroundColor])""",
            side,
        )
        marked = {c for step, c in colors if step == "25"}
        others = {c for step, c in colors if step != "25"}
        assert marked and not marked & others, colors
    summary = page.locator("#diff-summary").inner_text()
    assert "Step 25" in summary and "priority_self_preemption_continues" in summary
    explains = page.locator("#release-changes tr.explains")
    assert explains.count() == 1
    assert explains.get_attribute("data-flag") == "priority_self_preemption_continues"
    badges = page.locator(".release-badge").all_text_contents()
    assert badges == ["vLLM 0.20", "vLLM 0.33"]
    assert console.errors == []


def test_a_recording_re_run_under_both_releases(
    page: Any, server: Server, console: Console
) -> None:
    r = server.api("POST", "/api/compare/releases", json={"scenario": "async_placeholders"})
    assert r.status_code == 200, r.text
    source = r.json()["a"]
    page.goto(server.url + "/?session=" + source)
    page.wait_for_function("() => batchscope.conn.snapshots > 0")
    page.select_option("#rp-a", "0.33")
    page.select_option("#rp-b", "0.20")
    page.click("#btn-release-pair")
    page.wait_for_url("**/compare?a=*", timeout=60_000)
    page.wait_for_selector("body[data-drawn=yes]", timeout=30_000)
    step = page.locator("#first-diff").get_attribute("data-step")
    assert step not in (None, "")
    assert page.locator("#gantt-a").get_attribute("data-diff-step") == step
    badges = page.locator(".release-badge").all_text_contents()
    assert badges == ["vLLM 0.33", "vLLM 0.20"]
    assert page.locator("#release-changes tr.explains").get_attribute("data-flag") == (
        "lone_request_uncapped"
    )
    assert console.errors == []
