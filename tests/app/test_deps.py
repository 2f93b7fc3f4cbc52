"""NotFound becomes a 404 in one place (app.deps): JSON for the API, the error flash for
htmx, the not-found page for pages."""

from __future__ import annotations

from tests.conftest import LiveServer


def test_not_found_is_a_404_in_every_form(live_server: LiveServer) -> None:
    with live_server.client() as c:
        r = c.get("/api/sessions/nope")
        assert r.status_code == 404 and r.json() == {
            "detail": "no recorded session 'nope'",
            "errors": [],
        }
        r = c.post("/api/requests/nope/abort")
        assert r.status_code == 404 and r.json()["detail"] == "no live request 'nope'"
        r = c.post("/api/requests/nope/abort", headers={"HX-Request": "true"})
        assert r.status_code == 200 and "flash-error" in r.text and "no live request" in r.text
        for path in ("/?session=nope", "/compare?a=nope&b=nope"):
            r = c.get(path)
            assert r.status_code == 404 and "text/html" in r.headers["content-type"], path
            assert "no recorded session" in r.text
        r = c.post("/api/scenarios/nope/load")
        assert r.status_code == 404 and r.json()["detail"] == "no scenario named 'nope'"
