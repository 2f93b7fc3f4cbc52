"""Every documented route, fuzzed by schemathesis from /openapi.json against a real server
(with the control token, so that it gets past authentication), plus arbitrary JSON bodies
on every body-taking route: no 5xx, ever. Bounded in time for CI."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import httpx
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from tests.conftest import TOKEN, LiveServer

AUTH = {"Authorization": f"Bearer {TOKEN}"}
EXAMPLES = 6


def test_no_route_answers_a_server_error(fuzz_server: LiveServer) -> None:
    """Each operation of the schema, valid (positive) and invalid (negative) inputs.
    (schemathesis' pytest plugin predates our pytest: its strategies are driven here.)"""
    schema = schemathesis.openapi.from_url(fuzz_server.url + "/openapi.json")
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15
    for operation in operations:
        for mode in schemathesis.GenerationMode:

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                database=None,
            )
            def run(case: Any) -> None:
                response = case.call(base_url=fuzz_server.url, headers=AUTH, timeout=30)
                if response.status_code >= 500:
                    failures.append(
                        f"{case.method} {case.formatted_path} {case.query}: "
                        f"{response.status_code} {response.text[:200]}"
                    )

            with contextlib.suppress(Unsatisfiable):  # nothing to make invalid
                run()
    assert not failures, "\n".join(failures[:20])


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
KEYS = st.sampled_from(
    [
        "prompt",
        "prompt_len",
        "max_tokens",
        "count",
        "priority",
        "temperature",
        "name",
        "runner",
        "rate",
        "enabled",
        "max_num_seqs",
        "max_num_batched_tokens",
        "policy",
        "shared_prefix",
    ]
)
BODIES = st.dictionaries(KEYS, JSON, max_size=5) | JSON
ROUTES = st.sampled_from(
    [
        ("POST", "/api/requests"),
        ("POST", "/api/config"),
        ("POST", "/api/workload"),
        ("PATCH", "/api/sessions/s-none"),
        ("POST", "/api/sessions/s-none/rerun"),
        ("POST", "/api/requests/req-1/abort"),
        ("POST", "/api/scenarios/none/load"),
    ]
)


@given(route=ROUTES, body=BODIES, as_form=st.booleans())
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_arbitrary_bodies_never_get_a_server_error(
    fuzz_server: LiveServer, route: tuple[str, str], body: Any, as_form: bool
) -> None:
    method, path = route
    # NaN and Infinity included: Python's JSON writes them, and so may a hostile client.
    kwargs: dict[str, Any] = {
        "content": json.dumps(body),
        "headers": {**AUTH, "content-type": "application/json"},
    }
    if as_form and isinstance(body, dict):
        kwargs = {"data": {k: str(v) for k, v in body.items()}, "headers": AUTH}
    r = httpx.request(method, fuzz_server.url + path, timeout=30, **kwargs)
    assert r.status_code < 500, (method, path, body, r.text)
