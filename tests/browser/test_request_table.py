"""The request table takes a click while it redraws: a press on a row and its release
select that row even when a draw (a step, a selection made elsewhere) lands between them.
The table redraws in place (the row, the cell and the status badge under the pointer stay
the nodes they were: a node replaced between press and release gets no click at all), and
a press and a release at the same place select the row pressed even if it moved away."""

from __future__ import annotations

from typing import Any

from tests.browser.harness import Console, Server

ALL_FINISHED = (
    "() => batchscope.model.order.length >= 2"
    " && batchscope.model.order.every(id => batchscope.model.reqs.get(id).status === 'FINISHED')"
)


def press(page: Any, cell: Any) -> None:
    """Press the mouse button in the middle of `cell` (a locator), holding it down."""
    cell.scroll_into_view_if_needed()
    box = cell.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()


def test_a_row_redrawn_under_the_pointer_still_takes_the_click(
    page: Any, server: Server, console: Console
) -> None:
    resp = server.api("POST", "/api/requests", json={"prompt_len": 16, "max_tokens": 4, "count": 2})
    assert resp.status_code == 201, resp.text
    page.wait_for_function(ALL_FINISHED)
    first, second = page.evaluate("() => batchscope.model.order.slice(0, 2)")
    press(page, page.locator(f'#requests-table tr[data-req="{second}"] td').first)
    page.evaluate("r => batchscope.select(r, {})", first)  # the table redraws: `first` is selected
    page.locator(f'#requests-table tr.selected[data-req="{first}"]').wait_for()
    page.locator(f'#rq-body[data-req="{first}"]').wait_for()
    page.mouse.up()
    page.locator(f'#rq-body[data-req="{second}"]').wait_for()
    assert f"req={second}" in page.url
    assert page.locator("#requests-table tr.selected").count() == 1
    assert console.errors == []


def test_a_cell_that_changes_under_the_pointer_still_takes_the_click(
    page: Any, server: Server, console: Console
) -> None:
    # Paused and stepped by hand: the cell changes while the button is down whatever the
    # machine's load (a free-running request can finish before a slow page draws it).
    assert server.api("POST", "/api/pause").status_code == 200
    resp = server.api("POST", "/api/requests", json={"prompt_len": 16, "max_tokens": 64})
    assert resp.status_code == 201, resp.text
    row = page.locator("#requests-table tr[data-status=waiting]")
    row.wait_for()
    req = row.get_attribute("data-req")
    tokens = row.locator("td").nth(3)  # computed / total tokens: it grows every step
    before = tokens.text_content()
    press(page, tokens)
    assert server.api("POST", "/api/step").status_code == 200  # its prompt is computed
    # (null-safe: a poll between two draws of a loaded page may find no row; it polls on)
    page.wait_for_function(
        "([r, t]) => { const tr = document.querySelector(`#requests-table tr[data-req='${r}']`);"
        " return tr !== null && tr.cells[3].textContent !== t; }",
        arg=[req, before],
    )
    page.mouse.up()
    page.locator(f'#rq-body[data-req="{req}"]').wait_for()
    page.locator(f'#requests-table tr.selected[data-req="{req}"]').wait_for()
    assert f"req={req}" in page.url
    assert console.errors == []  # the request may have finished by now: the server goes per test


def test_a_status_badge_that_changes_under_the_pointer_still_takes_the_click(
    page: Any, server: Server, console: Console
) -> None:
    assert server.api("POST", "/api/pause").status_code == 200
    resp = server.api("POST", "/api/requests", json={"prompt_len": 16, "max_tokens": 64})
    assert resp.status_code == 201, resp.text
    row = page.locator("#requests-table tr[data-status=waiting]")
    row.wait_for()
    req = row.get_attribute("data-req")
    press(page, row.locator("span.status"))
    assert server.api("POST", "/api/step").status_code == 200  # it is scheduled: running
    page.wait_for_function(
        "r => document.querySelector(`#requests-table tr[data-req='${r}'] span.status`)"
        ".textContent === 'running'",
        arg=req,
    )
    page.mouse.up()
    page.locator(f'#rq-body[data-req="{req}"]').wait_for()
    page.locator(f'#requests-table tr.selected[data-req="{req}"]').wait_for()
    assert f"req={req}" in page.url
    assert console.errors == []


def test_a_row_that_moves_away_under_a_still_pointer_is_still_the_one_selected(
    page: Any, server: Server, console: Console
) -> None:
    resp = server.api("POST", "/api/requests", json={"prompt_len": 16, "max_tokens": 4, "count": 3})
    assert resp.status_code == 201, resp.text
    page.wait_for_function(ALL_FINISHED.replace(">= 2", ">= 3"))
    req = page.evaluate("() => batchscope.model.order[1]")
    press(page, page.locator(f'#requests-table tr[data-req="{req}"] td').nth(2))
    # Something above the table grows while the button is down: the rows slide down, so
    # the release lands on another row (or on none) where the pressed one was.
    page.evaluate("() => { document.getElementById('req-scroll').style.marginTop = '90px'; }")
    page.mouse.up()
    page.locator(f'#rq-body[data-req="{req}"]').wait_for()
    page.locator(f'#requests-table tr.selected[data-req="{req}"]').wait_for()
    assert page.locator("#requests-table tr.selected").count() == 1
    # A press dragged off the row to another one is no selection (the tap moved > 5 px).
    other = page.evaluate("() => batchscope.model.order[2]")
    press(page, page.locator(f'#requests-table tr[data-req="{other}"] td').nth(2))
    page.mouse.move(600, 5, steps=4)
    page.mouse.up()
    page.wait_for_timeout(300)
    assert f"req={req}" in page.url
    assert console.errors == []
