"""Hostile HTTP input gets a clear 4xx from a real server on both backends: foreign Host
names (DNS rebinding), NUL bytes, integers beyond 64 bits, deeply nested and oversized
JSON bodies. Never a 500."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from app.db.migrate import upgrade
from tests.conftest import LiveServer, start_server


@pytest.fixture
def server(database_url: str) -> Iterator[LiveServer]:
    upgrade(database_url)
    live, srv, thread = start_server(database_url=database_url, allowed_hosts=["dash.example"])
    yield live
    srv.should_exit = True
    thread.join(10)


def test_only_the_hosts_the_server_was_started_for_are_served(server: LiveServer) -> None:
    with server.client() as c:
        assert c.get("/api/sessions").status_code == 200
        for host in ("localhost:8000", "127.0.0.1", "[::1]:8000", "10.1.2.3", "dash.example"):
            assert c.get("/api/sessions", headers={"Host": host}).status_code == 200, host
        for host in ("evil.example", "evil.example:8000", "127.0.0.1.nip.io"):
            r = c.get("/api/sessions", headers={"Host": host})
            assert r.status_code == 400 and "not served here" in r.json()["detail"], host


def test_nul_bytes_big_integers_and_deep_json_get_4xx(server: LiveServer) -> None:
    with server.client() as c:
        assert c.get("/api/sessions/s-a%00b").status_code == 400
        assert c.get("/api/sessions", params={"q": "a\x00b"}).status_code == 400
        for step in (2**64, -(2**70), 2**31):
            r = c.get("/api/sessions/s-x/state", params={"step": step})
            assert r.status_code == 422, (step, r.text)
        assert c.get("/api/sessions/s-x/state", params={"step": 5}).status_code == 404
        deep = "[" * 5000 + "]" * 5000
        for method, path in (
            ("POST", "/api/requests"),
            ("POST", "/api/config"),
            ("PATCH", "/api/sessions/s-x"),
            ("POST", "/api/sessions/s-x/rerun"),
        ):
            r = c.request(method, path, content=deep, headers={"content-type": "application/json"})
            assert r.status_code == 400 and "nested" in r.json()["detail"], (path, r.text)
            nested = '{"name":' * 40 + '"x"' + "}" * 40
            r = c.request(
                method, path, content=nested, headers={"content-type": "application/json"}
            )
            assert r.status_code == 400, (path, r.text)
        r = c.post(
            "/api/requests",
            content=b"{" + b" " * (2 << 20) + b"}",
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 413
        r = c.post("/api/requests", json={"prompt_len": 10**30})
        assert r.status_code == 422


def test_non_finite_numbers_in_forms_are_refused(server: LiveServer) -> None:
    with server.client() as c:
        r = c.post("/api/requests", json={"temperature": "nan", "prompt_len": 3})
        assert r.status_code == 422 and "finite" in r.json()["detail"]
        r = httpx.post(
            server.url + "/api/requests", json={"x": 1}, headers={"Host": "evil.example"}
        )
        assert r.status_code == 400
