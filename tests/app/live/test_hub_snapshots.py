"""EventHub.snapshot_frame: one encoding per seq and form, a fresh one after any frame."""

from __future__ import annotations

import json

from app.live.hub import EventHub


def _arrive(hub: EventHub, req: str) -> None:
    detail = {"num_prompt_tokens": 8, "max_tokens": 4, "priority": 0}
    hub.publish("s", "request", {"kind": "arrived", "req": req, "t": 0.0, "step": 0,
                                 "detail": detail})  # fmt: skip


def test_snapshots_are_encoded_once_per_seq_and_form() -> None:
    hub = EventHub()
    hub.open_session("s", {"config": {}})
    _arrive(hub, "a")
    seq, plain = hub.snapshot_frame("s")
    assert hub.snapshot_frame("s") == (seq, plain)
    _, columns = hub.snapshot_frame("s", columns=True)
    assert columns != plain and hub.snapshot_frame("s", columns=True)[1] is columns
    assert json.loads(columns)["data"]["requests"]["rows"][0][0] == "a"
    _arrive(hub, "b")
    seq2, text = hub.snapshot_frame("s", columns=True)
    assert seq2 == seq + 1 and len(json.loads(text)["data"]["requests"]["rows"]) == 2
    assert set(hub.sessions["s"].snapshots) == {(seq2, False, True)}
