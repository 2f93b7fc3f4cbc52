"""Recorded sessions over HTTP: list, rename, delete, re-run under other knobs, compare."""

from __future__ import annotations

import time
from pathlib import Path

from tests.conftest import cli, server_process


def _wait_recorded(c, session: str, n: int) -> dict:  # type: ignore[no-untyped-def]
    """The sessions list once the recorder has written `session` with its n requests to
    the database (the list also shows live sessions the recorder has not reached yet)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        r = c.get(f"/api/sessions/{session}")
        if r.status_code == 200 and r.json()["requests"] == n:
            break
        time.sleep(0.1)
    return {s["id"]: s for s in c.get("/api/sessions").json()}


def _wait_finished(c, n: int) -> dict:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        state = c.get("/api/state").json()
        if sum(1 for r in state["requests"] if r["status"] == "FINISHED") >= n:
            return state  # type: ignore[no-any-return]
        time.sleep(0.05)
    raise AssertionError("requests did not finish")


def test_rerun_under_other_knobs_and_compare(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    cli("db", "upgrade", "--database-url", url, check=True)
    with server_process(database_url=url) as live, live.client() as c:
        assert c.post("/api/scenarios/long_prompt_vs_decodes/load").status_code == 200
        original = _wait_finished(c, 9)["session"]
        sessions = _wait_recorded(c, original, 9)
        assert sessions[original]["requests"] == 9

        r = c.post(f"/api/sessions/{original}/rerun", json={"long_prefill_token_threshold": 0})
        assert r.status_code == 200, r.text
        rerun = r.json()["session"]
        assert "long_prefill_token_threshold=0" in r.json()["name"]
        # The scenario states the article's release: the re-run decides as it did.
        assert (r.json()["vllm_version"], r.json()["release_chosen"]) == ("0.20", "as recorded")
        other = c.post(f"/api/sessions/{original}/rerun", json={"vllm_version": "0.33"}).json()
        assert (other["vllm_version"], other["release_chosen"]) == ("0.33", "as asked")
        refused = c.post(f"/api/sessions/{original}/rerun", json={"vllm_version": "0.99"})
        assert refused.status_code == 422 and "vllm_version" in refused.text

        cmp = c.get("/api/compare", params={"a": original, "b": rerun}).json()
        assert cmp["a"]["finished"] == cmp["b"]["finished"] == 9
        assert cmp["a"]["config"]["long_prefill_token_threshold"] == 128
        assert cmp["b"]["config"]["long_prefill_token_threshold"] == 0
        # Without the per-request cap the 600-token prompt goes through in fewer steps.
        a_state = c.get(f"/api/sessions/{original}/state").json()
        b_state = c.get(f"/api/sessions/{rerun}/state").json()
        long_a = next(r for r in a_state["requests"] if r["req"] == "LONG")
        long_b = next(r for r in b_state["requests"] if r["req"] == "LONG")
        prefill_a = [s for s in long_a["segments"] if s[0] == "prefill"]
        prefill_b = [s for s in long_b["segments"] if s[0] == "prefill"]
        assert sum(s[3] for s in prefill_a) == sum(s[3] for s in prefill_b) == 600
        assert len(prefill_b) < len(prefill_a)
        # Total work is conserved: chunking changes granularity, not the amount.
        assert a_state["totals"]["scheduled_tokens"] == b_state["totals"]["scheduled_tokens"]

        bad = c.post(f"/api/sessions/{original}/rerun", json={"max_num_seqs": 10**6})
        assert bad.status_code == 422 and "max_num_batched_tokens" in bad.json()["detail"]
        assert c.post("/api/sessions/nope/rerun", json={}).status_code == 404
        assert c.get("/api/compare", params={"a": "nope", "b": rerun}).status_code == 404

        assert c.patch(f"/api/sessions/{rerun}", json={"name": "no chunk cap"}).status_code == 200
        assert c.get(f"/api/sessions/{rerun}").json()["name"] == "no chunk cap"
        assert c.patch(f"/api/sessions/{rerun}", json={"name": ""}).status_code == 422
        live_id = c.get("/api/state").json()["session"]
        assert c.delete(f"/api/sessions/{live_id}").status_code == 409
        assert c.delete(f"/api/sessions/{rerun}").status_code == 200
        assert c.get(f"/api/sessions/{rerun}").status_code == 404
        assert c.delete("/api/sessions/nope").status_code == 404
    with server_process(database_url=url) as live, live.client(token=False) as anon:
        assert anon.delete(f"/api/sessions/{original}").status_code == 401


def test_a_rerun_decides_as_the_recording_s_release(tmp_path: Path) -> None:
    """Recorded release first; a vLLM node's own release (the nearest supported one when
    it is not supported, said so); recordings from before releases were stated: 0.20."""
    from sqlalchemy.orm import sessionmaker

    from app.db.migrate import upgrade
    from app.db.models import SessionRecord
    from app.db.session import make_engine
    from app.records.rerun import recorded_release

    url = f"sqlite:///{tmp_path / 'releases.sqlite'}"
    upgrade(url)
    db = sessionmaker(make_engine(url))
    rows = {
        "ours-033": ({"vllm_version": "0.33"}, {}),
        "ours-old": ({"max_num_seqs": 4}, {}),
        "node-033": ({}, {"engine": "vllm", "vllm_version": "0.33.0"}),
        "node-032": ({}, {"engine": "vllm", "vllm_version": "0.32.0+cpu"}),
        "ours-027": ({"vllm_version": "0.27"}, {}),
        "node-019": ({}, {"engine": "vllm", "vllm_version": "0.19.1"}),
        "node-040": ({}, {"engine": "vllm", "vllm_version": "0.40.0"}),
    }
    with db.begin() as s:
        for sid, (config, meta) in rows.items():
            s.add(SessionRecord(id=sid, name=sid, config=config, meta=meta, started_at=0.0))
    with db() as s:
        chosen = {sid: recorded_release(s, sid) for sid in rows}
    assert chosen["ours-033"] == ("0.33", "as recorded")
    assert chosen["ours-old"][0] == "0.20"
    assert chosen["node-033"] == ("0.33", "the node's vLLM 0.33.0")
    # Every release 0.20 .. 0.34 is its own; outside them, the nearest, said so.
    assert chosen["node-032"] == ("0.32", "the node's vLLM 0.32.0+cpu")
    assert chosen["ours-027"] == ("0.27", "as recorded")
    for sid, release in (("node-019", "0.20"), ("node-040", "0.34")):
        chosen_release, why = chosen[sid]
        assert chosen_release == release and "nearest supported release" in why, why
