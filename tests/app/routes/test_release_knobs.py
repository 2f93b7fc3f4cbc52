"""The knobs of later vLLM releases (max_num_active_seqs, watermark,
prefill_schedule_interval, long_prefill_token_threshold_adaptive) through the live knobs
API and the new-session API, over a real server and engine process: taken on a release
that has them, refused with the release that added them on one that does not."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.conftest import LiveServer

LATER = {
    "max_num_active_seqs": 2,
    "watermark": 0.05,
    "prefill_schedule_interval": 2,
    "long_prefill_token_threshold_adaptive": True,
}


def _state(c: httpx.Client) -> dict[str, Any]:
    body: dict[str, Any] = c.get("/api/state").json()
    return body


def _wait(predicate: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_live_knobs_of_0_33_are_taken_and_cap_admission(live_server: LiveServer) -> None:
    with live_server.client() as c:
        assert _state(c)["config"]["vllm_version"] == "0.34"  # the default release
        r = c.post("/api/config", json=LATER)
        assert r.status_code == 200, r.text
        config = r.json()["config"]
        assert {k: config[k] for k in LATER} == LATER
        # The form posts text (htmx): the same knobs as form fields.
        r = c.post("/api/config", data={"watermark": "0.1", "prefill_schedule_interval": "1"})
        assert r.status_code == 200, r.text
        assert r.json()["config"]["watermark"] == 0.1
        _wait(lambda: _state(c)["config"]["watermark"] == 0.1, "config frame")
        # The admission cap holds: 5 long requests, never more than 2 running.
        r = c.post("/api/requests", json={"prompt_len": 16, "max_tokens": 400, "count": 5})
        assert r.status_code == 201, r.text

        def capped() -> bool:
            state = _state(c)
            reasons = {q["waiting_reason"] for q in state["requests"]}
            return "max_num_active_seqs" in reasons

        _wait(capped, "a request waits on the admission cap")
        running = [q for q in _state(c)["requests"] if q["status"] == "RUNNING"]
        assert len(running) <= 2
        # Out of range: the field and vLLM's rule.
        r = c.post("/api/config", json={"max_num_active_seqs": 10_000})
        assert r.status_code == 422 and r.json()["detail"].startswith("max_num_active_seqs:")
        r = c.post("/api/config", json={"watermark": 1.5})
        assert r.status_code == 422 and r.json()["detail"].startswith("watermark:")


def test_on_0_20_the_later_knobs_are_refused_with_their_release(
    live_server: LiveServer,
) -> None:
    with live_server.client() as c:
        assert c.post("/api/config", json={"max_num_active_seqs": 3}).status_code == 200
        # Asked for on 0.20: refused, naming the release that added it; nothing starts.
        before = _state(c)["session"]
        r = c.post("/api/engine/session", json={"vllm_version": "0.20", "watermark": 0.1})
        assert r.status_code == 422, r.text
        assert "vLLM 0.20 has no watermark (added in 0.24)" in r.json()["detail"]
        assert _state(c)["session"] == before
        # Carried over from the 0.33 session (not asked for): back to its default.
        r = c.post("/api/engine/session", json={"vllm_version": "0.20"})
        assert r.status_code == 200, r.text
        session = r.json()["session"]
        _wait(lambda: _state(c)["session"] == session, "the new session is live")
        config = _state(c)["config"]
        assert config["vllm_version"] == "0.20" and config["max_num_active_seqs"] == 0
        for knob, value in LATER.items():
            r = c.post("/api/config", json={knob: value})
            assert r.status_code == 422, (knob, r.text)
            detail = r.json()["detail"]
            assert detail.startswith(f"{knob}: vLLM 0.20 has no {knob} (added in 0."), detail
        # Their defaults are no change, so they pass on 0.20.
        assert c.post("/api/config", json={"prefill_schedule_interval": 1}).status_code == 200
        # A new 0.33 session takes them at once.
        r = c.post("/api/engine/session", json={"vllm_version": "0.33", **LATER})
        assert r.status_code == 200, r.text
        session = r.json()["session"]
        _wait(lambda: _state(c)["session"] == session, "the 0.33 session is live")
        config = _state(c)["config"]
        assert {k: config[k] for k in LATER} == LATER and config["vllm_version"] == "0.33"


def test_a_release_in_between_is_taken_and_an_unknown_one_refused(
    live_server: LiveServer,
) -> None:
    with live_server.client() as c:
        before = _state(c)["session"]
        for unknown in ("0.19", "0.35", "0.2x"):
            r = c.post("/api/engine/session", json={"vllm_version": unknown})
            assert r.status_code == 422, r.text
            detail = r.json()["detail"]
            assert detail.startswith("vllm_version:") and "from 0.20 to 0.34" in detail, detail
        assert _state(c)["session"] == before
        # 0.27 has the watermark (0.24) but not the admission cap (0.31).
        r = c.post("/api/engine/session", json={"vllm_version": "0.27", "max_num_active_seqs": 2})
        assert r.status_code == 422, r.text
        assert "vLLM 0.27 has no max_num_active_seqs (added in 0.31)" in r.json()["detail"]
        # A patch release is its minor release; the form posts text.
        r = c.post("/api/engine/session", data={"vllm_version": "0.27.1", "watermark": "0.05"})
        assert r.status_code == 200, r.text
        session = r.json()["session"]
        _wait(lambda: _state(c)["session"] == session, "the 0.27 session is live")
        config = _state(c)["config"]
        assert (config["vllm_version"], config["watermark"]) == ("0.27", 0.05)
        # The New session form offers every release, 0.27 selected now.
        page = c.get("/").text
        for minor in range(20, 34):
            assert f'<option value="0.{minor}"' in page
        assert '<option value="0.27" selected>' in page
