"""Swagger UI at /docs (issue 11): it loads from our own server only (vendored, no CDN),
"Authorize" takes the control token, and "Try it out" runs a control action with it."""

from __future__ import annotations

from typing import Any

from tests.browser.harness import Console, Server


def test_swagger_try_it_out_with_the_token(browser: Any, server: Server, console: Console) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = console.watch(context.new_page(), server.url)
        page.goto(server.url + "/docs")
        page.locator(".btn.authorize").first.click()
        page.locator(".auth-container input").first.fill(server.token)
        page.locator(".auth-btn-wrapper .btn.authorize").first.click()
        page.locator(".btn-done").first.click()
        op = page.locator("#operations-control-pause_api_pause_post")
        op.locator(".opblock-summary").click()
        try_out = op.locator(".try-out__btn")
        if try_out.count() and try_out.inner_text().strip() == "Try it out":
            try_out.click()
        op.locator(".execute").click()
        status = op.locator(".live-responses-table tbody .response-col_status").first
        status.wait_for(timeout=10_000)
        assert status.inner_text().strip() == "200"
        assert "paused" in op.locator(".live-responses-table .microlight").first.inner_text()
        assert server.api("GET", "/api/state").json()["paused"] is True
        assert console.foreign == [], console.foreign
        assert console.errors == [], console.errors
    finally:
        context.close()
