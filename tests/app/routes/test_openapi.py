"""The typed API: /openapi.json documents a body, a response model, a tag and the error
answers of every route; every error has one body; a 401 names the Bearer scheme; and
every documented operation, called the way Swagger's "Try it out" calls it (the token as
the bearer, a same-origin request, a body the schema accepts), answers as documented."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.conftest import LiveServer

WRITES = ("post", "patch", "put", "delete")
BODIES = {  # the smallest body each request schema accepts, as Swagger would send it
    "InjectBody": {"prompt_len": 8, "max_tokens": 64},
    "LiveKnobs": {"max_num_batched_tokens": 128},
    "WorkloadBody": {"rate": 1.5},
    "RenameBody": {"name": "renamed"},
    "RerunBody": {"max_num_seqs": 4},
    "NewSessionBody": {"max_num_seqs": 8},
    "LabSweepBody": {"scenario": "seed", "knob": "max_num_batched_tokens", "values": "8,16"},
    "ReleasePairBody": {"scenario": "seed"},
}


def _operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, m, op) for path, ops in spec["paths"].items() for m, op in ops.items()]


def test_every_route_is_typed_tagged_and_documents_its_errors(live_server: LiveServer) -> None:
    spec = httpx.get(live_server.url + "/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["token"] == {**schemes["token"], "type": "http", "scheme": "bearer"}
    writes = 0
    for path, method, op in _operations(spec):
        where = f"{method.upper()} {path}"
        assert op.get("tags"), where
        ok = next(code for code in op["responses"] if code.startswith("2"))
        assert op["responses"][ok].get("content"), where  # a response model or a media type
        for code, answer in op["responses"].items():
            if code.startswith(("4", "5")) and path != "/healthz":
                ref = answer["content"]["application/json"]["schema"]["$ref"]
                assert ref.endswith("/ErrorBody"), (where, code)
        if not path.startswith("/api/"):
            continue
        assert "401" in op["responses"] and op.get("security"), where
        if method in WRITES:
            writes += 1
            for code in ("401", "403", "409", "422", "503"):
                assert code in op["responses"], (where, code)
            assert op["responses"]["401"]["headers"]["WWW-Authenticate"], where
    assert writes >= 16  # live controls, sessions, the lab
    bodies = [op for _, m, op in _operations(spec) if "requestBody" in op]
    # inject, config, workload, rename, rerun, a lab sweep, a new engine session, a release
    # pair; the rest take none
    assert len(bodies) == len(BODIES)
    for op in bodies:
        content = op["requestBody"]["content"]
        assert set(content) == {"application/json", "application/x-www-form-urlencoded"}
        name = content["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
        assert name in BODIES and name in spec["components"]["schemas"]
    assert "HTTPValidationError" not in spec["components"]["schemas"]


def test_one_error_body_for_every_4xx(live_server: LiveServer) -> None:
    url = live_server.url
    with live_server.client() as c, httpx.Client(base_url=url) as anonymous:
        answers = {
            "401": anonymous.post("/api/pause"),
            "404 (lookup)": c.get("/api/sessions/nope"),
            "404 (route)": c.get("/api/nothing-here"),
            "405": c.put("/api/pause"),
            "409": c.delete(f"/api/sessions/{c.get('/api/state').json()['session']}"),
            "422 (body type)": c.post("/api/requests", json={"max_tokens": "many"}),
            "422 (settings bound)": c.post("/api/requests", json={"count": 10**6}),
            "422 (query)": c.get("/api/sessions/x/state", params={"step": "last"}),
            "422 (unknown field)": c.post("/api/workload", json={"speed": 3}),
            "400": c.post(
                "/api/config", content=b"{not json", headers={"content-type": "application/json"}
            ),
        }
    for what, r in answers.items():
        body = r.json()
        assert r.status_code == int(what[:3]), (what, r.status_code, body)
        assert set(body) == {"detail", "errors"}, (what, body)
        assert isinstance(body["detail"], str) and body["detail"], what
        for error in body["errors"]:
            assert set(error) == {"loc", "msg", "type"}, (what, error)
    assert answers["401"].headers["www-authenticate"] == "Bearer"
    assert answers["422 (body type)"].json()["errors"][0]["loc"] == ["body", "max_tokens"]
    assert answers["422 (settings bound)"].json()["errors"][0]["loc"] == ["body", "count"]
    assert answers["422 (query)"].json()["errors"][0]["loc"] == ["query", "step"]


def test_try_it_out_works_for_every_operation_with_the_token(live_server: LiveServer) -> None:
    url = live_server.url
    headers = {"Authorization": f"Bearer {live_server.token}", "Origin": url}
    with httpx.Client(base_url=url, headers=headers, timeout=10) as c:
        c.post("/api/requests", json={"prompt_len": 16, "max_tokens": 2})
        recorded = c.get("/api/state").json()["session"]
        deadline = time.monotonic() + 10
        while c.get(f"/api/sessions/{recorded}").status_code != 200:
            assert time.monotonic() < deadline, "the recording was not written"
            time.sleep(0.1)
        sweep = c.post("/api/lab/sweeps", json=BODIES["LabSweepBody"]).json()["sweep"]
        while c.get(f"/api/lab/sweeps/{sweep}").json()["status"] != "done":
            assert time.monotonic() < deadline + 60, "the sweep did not finish"
            time.sleep(0.2)
        live_req = c.post("/api/requests", json={"prompt_len": 8, "max_tokens": 500})
        c.post("/api/pause")
        params = {
            "session_id": recorded,
            "req_id": live_req.json()["req_ids"][0],
            "name": "seed",
            "a": recorded,
            "b": recorded,
            "sweep_id": sweep,
            "index": "0",
            "experiment": "s1_static_vs_continuous",
            "node": "n-1",
        }
        spec = c.get("/openapi.json").json()
        ops = _operations(spec)
        # Loading a scenario, a new engine session or a restart end the recorded session,
        # which the last call deletes.
        ops.sort(
            key=lambda o: (
                o[1] == "delete",
                o[0].endswith("/load") or (o[0].startswith("/api/engine/") and o[1] == "post"),
            )
        )
        for path, method, op in ops:
            for p in op.get("parameters", []):
                if p["in"] == "path":
                    path = path.replace("{" + p["name"] + "}", params[p["name"]])
            query = {
                p["name"]: params[p["name"]]
                for p in op.get("parameters", [])
                if p["in"] == "query" and p.get("required")
            }
            body = None
            if "requestBody" in op:
                ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                body = BODIES[ref.rsplit("/", 1)[1]]
            r = c.request(method, path, params=query, json=body)
            where = f"{method.upper()} {path}"
            assert str(r.status_code) in op["responses"], (where, r.status_code, r.text[:300])
            if path.endswith("/cancel") and r.status_code == 409:
                continue  # documented: that sweep already finished
            if path.startswith("/api/fleet/") and r.status_code == 404:
                continue  # documented: this server has no fleet bus
            assert r.status_code < 300, (where, r.status_code, r.text[:300])
