"""Every integer a client puts in a query or a path that reaches the database is bounded at
the edge: one past what a column holds (or 2^63, where SQLite's integers end) is a 422
naming the parameter, never a plain-text 500 from an OverflowError in the driver."""

from __future__ import annotations

import pytest

from tests.app.routes.test_forensics import run_scenario
from tests.conftest import LiveServer

HUGE = (2**63, 2**64 + 5, -(2**63) - 1)


@pytest.mark.parametrize("value", HUGE)
def test_integers_past_a_column_get_a_422_naming_the_parameter(
    live_server: LiveServer, value: int
) -> None:
    with live_server.client() as c:
        sid, _ = run_scenario(c, "seed")
        req = c.get(f"/api/sessions/{sid}/requests").json()[0]["req"]
        urls = {
            f"/api/requests/{req}?session={sid}&step={value}": "step",
            f"/api/sessions/{sid}/requests?step={value}": "step",
            f"/api/sessions/{sid}/requests?priority={value}": "priority",
            f"/api/sessions/{sid}/requests?offset={value}": "offset",
            f"/api/sessions/{sid}/requests?limit={value}": "limit",
            f"/api/sessions/{sid}/blocks?step={value}": "step",
            f"/api/sessions/{sid}/state?step={value}": "step",
            f"/api/requests?priority={value}": "priority",
            f"/api/requests?offset={value}": "offset",
            f"/panels/stats?replay={sid}&step={value}": "step",
        }
        for url, name in urls.items():
            r = c.get(url)
            assert r.status_code == 422, (url, r.status_code, r.text[:200])
            assert r.headers["content-type"].startswith("application/json"), url
            assert r.json()["detail"].startswith(name + ":"), (url, r.json()["detail"])
        r = c.post(f"/api/lab/sweeps/nope/points/{value}/session")
        assert r.status_code == 422 and r.json()["detail"].startswith("index:"), r.text
