"""The request table takes a click while it redraws: a press on a row and its release
select that row even when a draw (a step, a selection made elsewhere) lands between them.
The table redraws in place, so the row and the cell under the pointer stay the nodes
they were; a node replaced between press and release gets no click at all."""

from __future__ import annotations

from typing import Any

from tests.browser.harness import Console, Server

ALL_FINISHED = (
    "() => BS.model.order.length >= 2"
    " && BS.model.order.every(id => BS.model.reqs.get(id).status === 'FINISHED')"
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
    first, second = page.evaluate("() => BS.model.order.slice(0, 2)")
    press(page, page.locator(f'#requests-table tr[data-req="{second}"] td').first)
    page.evaluate("r => BS.select(r, {})", first)  # the table redraws: `first` is selected
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
    resp = server.api("POST", "/api/requests", json={"prompt_len": 16, "max_tokens": 1024})
    assert resp.status_code == 201, resp.text
    row = page.locator("#requests-table tr[data-status=running]")
    row.wait_for()
    req = row.get_attribute("data-req")
    tokens = row.locator("td").nth(3)  # computed / total tokens: it grows every step
    before = tokens.text_content()
    press(page, tokens)
    page.wait_for_function(
        "([r, t]) => document.querySelector(`#requests-table tr[data-req='${r}']`)"
        ".cells[3].textContent !== t",
        arg=[req, before],
    )
    page.mouse.up()
    page.locator(f'#rq-body[data-req="{req}"]').wait_for()
    assert server.api("POST", f"/api/requests/{req}/abort").status_code < 300
    assert console.errors == []
