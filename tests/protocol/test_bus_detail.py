"""Who a bus node owes its full frames (protocol.bus.Detail): leases, incident windows,
`always`, and where the frames a dashboard gets start."""

from __future__ import annotations

from protocol.bus import MAX_LEASE_S, Detail
from protocol.envelope import encode
from protocol.producer import ProducerCore


def _frames(n: int, t0: float = 100.0) -> ProducerCore:
    core = ProducerCore("s-1", "n1", max_frames=6)
    for i in range(1, n + 1):
        core.add("request", encode(i), now=t0 + i)
    return core


def test_a_lease_starts_after_what_the_dashboard_has_and_ends() -> None:
    frames, detail = _frames(8), Detail(always=False)
    assert not detail.detailing(0.0)
    reply = detail.answer({"type": "detail", "for_s": 30, "after_seq": 5}, frames, 1000.0)
    assert reply == {
        "type": "detail",
        "session": "s-1",
        "from_seq": 6,
        "oldest_seq": 3,
        "last_seq": 8,
        "lease_s": 30.0,
    }
    assert detail.detailing(1029.0) and not detail.detailing(1031.0)
    detail.stored(8)
    assert (detail.cursor, detail.prev_stored) == (8, 8)
    # A second dashboard that has less rewinds the cursor (and the next message's prev).
    reply = detail.answer({"type": "detail", "for_s": 10, "after_seq": 0}, frames, 1001.0)
    assert reply["from_seq"] == 3 and (detail.cursor, detail.prev_stored) == (0, 0)
    assert reply["lease_s"] == 29.0  # a shorter lease does not cut the longer one


def test_a_window_sends_the_last_seconds_once() -> None:
    frames, detail = _frames(8), Detail(always=False)
    reply = detail.answer({"type": "window", "seconds": 3}, frames, 108.5)
    assert detail.cursor == 5 and detail.stop_at == 8 and reply["from_seq"] == 6
    assert detail.detailing(108.5)
    detail.stored(8)
    assert not detail.detailing(108.5)


def test_always_and_bad_requests() -> None:
    frames, detail = _frames(2), Detail(always=True)
    assert detail.detailing(1e12)
    reply = detail.answer({"type": "detail", "for_s": 1}, frames, 0.0)
    assert reply["lease_s"] == MAX_LEASE_S
    assert detail.answer({"type": "nope"}, frames, 0.0) == {
        "type": "error",
        "detail": "control: unknown type 'nope'",
    }
    assert detail.answer({"type": "detail", "for_s": -1}, frames, 0.0)["type"] == "error"
    assert detail.answer({"type": "window", "seconds": 0}, frames, 0.0)["type"] == "error"
