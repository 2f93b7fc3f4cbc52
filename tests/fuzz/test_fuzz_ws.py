"""The websocket protocols, fuzzed with hypothesis against a real server: /ws/live (hello,
pong, replay commands) and /ws/ingest (announce, every frame type with fields replaced by
arbitrary JSON, reply, stats), plus binary frames and deep nesting. Every socket is either
answered or closed with a close code (never dropped, never 1011), and the server stays
healthy. Bounded in time for CI."""

from __future__ import annotations

import json
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.conftest import TOKEN, LiveServer

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=16),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3)
    ),
    max_leaves=8,
)
RAW = st.sampled_from([b"\x00\xffbinary", "[" * 2000 + "]" * 2000, "{not json", "", "null"])

ITERATION = {
    "step": 1, "t_start": 0.1, "duration": 0.01, "forward_ms": 1.0, "overhead_us": 1.0,
    "simulated": True, "scheduled": [{"req": "r1", "n": 4, "start": 0, "phase": "prefill",
    "prefix_hit": 0, "sample": True}], "new": ["r1"], "resumed": [], "preempted": [],
    "finished": [], "arrived": ["r1"], "rejected": [], "sampled": ["r1"],
    "queues": {"running": 1, "waiting": 0, "running_end": 1, "waiting_end": 0},
    "budget": {"max_tokens": 16, "used": 4, "max_seqs": 4, "prefill": 4, "decode": 0},
    "kv": {"total": 8, "used": 1, "cached_free": 0, "hit_tokens": 0, "used_end": 1},
    "blocks": [[1, "used", "r1", 1]], "waiting_reasons": {}, "config_version": 0,
}  # fmt: skip
VALID = {
    "iteration": ITERATION,
    "request": {"req": "r1", "kind": "arrived", "step": 0, "t": 0.0, "detail": {"max_tokens": 3}},
    "config": {"step": 0, "config_version": 1, "changes": {}, "config": {}},
    "session": {"event": "opened", "name": "fuzz"},
}


@st.composite
def frames(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(sorted(VALID)))
    data = dict(VALID[kind])
    if data and draw(st.booleans()):
        data[draw(st.sampled_from(sorted(data)))] = draw(JSON)
    seq = draw(st.integers(min_value=1, max_value=6) | st.integers() | JSON)
    return {"v": 1, "type": kind, "seq": seq, "data": draw(st.just(data) | JSON)}


INGEST_MESSAGES = (
    frames()
    | st.fixed_dictionaries({"type": st.just("reply"), "id": JSON, "ok": JSON, "detail": JSON})
    | st.fixed_dictionaries({"type": st.just("stats"), "buffered": JSON, "dropped": JSON})
    | st.lists(frames(), max_size=3)
    | JSON
    | RAW
)
IDS = st.text(alphabet="\x00\x01\x7fab-", max_size=4)
"""Session ids with control characters (PostgreSQL refuses NUL in text)."""
LIVE_MESSAGES = (
    st.fixed_dictionaries(
        {"type": st.sampled_from(["hello", "pong", "seek", "play", "pause", "step"])},
        optional={"session": JSON | IDS, "id": JSON, "step": JSON, "speed": JSON,
                  "delta": JSON, "mode": st.just("replay") | JSON, "acks": JSON,
                  "last_seq": JSON},
    )
    | JSON
    | RAW
)  # fmt: skip


def _exchange(url: str, messages: list[Any], headers: dict[str, str] | None = None) -> None:
    """Send each message; the socket must answer, stay open, or close with a code."""
    with connect(url, additional_headers=headers, max_size=None, open_timeout=10) as ws:
        try:
            for message in messages:
                ws.send(message if isinstance(message, (bytes, str)) else json.dumps(message))
                while True:  # drain what the server says, briefly
                    ws.recv(timeout=0.03)
        except TimeoutError:
            pass
        except ConnectionClosed as closed:
            assert closed.rcvd is not None, "dropped without a close frame"
            assert closed.rcvd.code != 1011, f"server error: {closed.rcvd.reason}"
            return


@given(first=LIVE_MESSAGES, rest=st.lists(LIVE_MESSAGES, max_size=4))
@settings(max_examples=70, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_live_socket_fuzz(fuzz_server: LiveServer, first: Any, rest: list[Any]) -> None:
    _exchange(fuzz_server.ws_url + "/ws/live", [first, *rest])
    assert httpx.get(fuzz_server.url + "/healthz", timeout=10).status_code < 500


@given(
    announce=st.fixed_dictionaries(
        {"type": st.just("announce")},
        optional={"session": st.none() | st.text(max_size=20) | JSON, "node": JSON,
                  "resume_key": JSON, "config": JSON, "model": JSON, "simulated": JSON},
    ) | JSON,
    rest=st.lists(INGEST_MESSAGES, max_size=6),
)  # fmt: skip
@settings(max_examples=70, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_ingest_socket_fuzz(fuzz_server: LiveServer, announce: Any, rest: list[Any]) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    _exchange(fuzz_server.ws_url + "/ws/ingest", [announce, *rest], headers)
    assert httpx.get(fuzz_server.url + "/healthz", timeout=10).status_code < 500


REPLAY_COMMANDS = st.fixed_dictionaries(
    {"type": st.sampled_from(["seek", "play", "pause", "step", "hello", "other"])},
    optional={"step": JSON | st.floats(), "speed": JSON | st.floats(), "delta": JSON},
)


@given(commands=st.lists(REPLAY_COMMANDS | JSON | RAW, min_size=1, max_size=5))
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_replay_socket_fuzz(fuzz_server: LiveServer, commands: list[Any]) -> None:
    live = httpx.get(fuzz_server.url + "/api/state", timeout=10).json()["session"]
    hello = {"type": "hello", "session": live, "mode": "replay"}
    _exchange(fuzz_server.ws_url + "/ws/live", [hello, *commands])
    assert httpx.get(fuzz_server.url + "/healthz", timeout=10).status_code < 500
