"""The producer core on its own (protocol.producer): numbering, the bounded history, what is
lost, the resend after a dashboard's last_seq, the handshake and the stats message."""

from __future__ import annotations

import json

import pytest

from protocol.envelope import encode, split_frame
from protocol.producer import ProducerCore, Refused


def _core(**bounds: float | int | bool) -> ProducerCore:
    return ProducerCore("s-1", "n1", **bounds)  # type: ignore[arg-type]


def _seqs(frames: list[tuple[int, str]]) -> list[int]:
    return [seq for seq, _ in frames]


def test_frames_are_numbered_and_enveloped_once() -> None:
    core = _core()
    seq, text = core.add("request", encode({"req": "a"}))
    assert seq == 1 and core.seq == 1
    assert json.loads(text) == {
        "v": 1,
        "type": "request",
        "session": "s-1",
        "seq": 1,
        "data": {"req": "a"},
    }
    parts = split_frame(text)
    assert parts is not None and parts.data_json == '{"req":"a"}'


def test_history_bounded_by_frames_counts_only_unsent_losses() -> None:
    core = _core(max_frames=3)
    for i in range(1, 4):
        core.add("request", encode(i))
    core.mark_sent(2)
    core.add("request", encode(4))  # seq 1 (sent) leaves: nothing lost
    assert core.dropped == 0 and core.oldest == 2 and len(core) == 3
    core.add("request", encode(5))  # seq 2 (sent) leaves
    core.add("request", encode(6))  # seq 3 (never sent) leaves: lost
    assert core.dropped == 1 and _seqs(core.pending()) == [4, 5, 6]
    assert core.buffered == 3


def test_history_bounded_by_chars_keeps_the_newest_frame() -> None:
    core = _core(max_chars=10)
    core.add("iteration", encode("x" * 50))
    core.add("iteration", encode("y" * 50))
    assert len(core) == 1 and core.oldest == 2 and core.dropped == 1
    assert core.chars == len(core.history[0][1])


def test_history_bounded_by_age_and_windows_by_time() -> None:
    core = _core(max_frames=5, max_age_s=10.0)
    for seq in range(1, 9):
        core.add("request", encode(seq), now=100.0 + seq)
    assert len(core) == 5 and core.oldest == 4
    assert _seqs(core.after(5)) == [6, 7, 8]
    assert _seqs(core.after(0)) == [4, 5, 6, 7, 8]  # older ones are gone
    assert _seqs(core.after(0, max_chars=3)) == [4]  # a cap still gives one frame
    assert core.after(8) == []
    assert core.first_at(106.0) == 6 and core.first_at(200.0) == 0
    core.add("request", encode(9), now=115.5)  # 4 and 5 are older than 10 s now
    assert core.oldest == 6


def test_holes_take_a_seq_and_count_what_they_stand_for() -> None:
    core = _core()
    core.add("request", encode(1))
    core.hole(lost=7)
    core.add("request", encode(3))
    assert core.seq == 3 and core.dropped == 7
    assert _seqs(core.pending()) == [1, 3]


def test_pending_limit_and_size() -> None:
    core = _core()
    for i in range(6):
        core.add("request", encode(i))
    assert _seqs(core.pending(limit=2)) == [1, 2]
    assert core.pending(limit=0) == []
    one = len(core.history[0][1])
    assert _seqs(core.pending(max_chars=2 * one + 1)) == [1, 2]
    core.mark_sent(4)
    assert _seqs(core.pending()) == [5, 6] and core.buffered == 2


def test_a_reliable_link_keeps_only_what_it_has_not_taken() -> None:
    core = _core(keep_sent=False)
    for i in range(5):
        core.add("request", encode(i))
    batch = core.pending(limit=3)
    core.mark_sent(batch[-1][0])
    assert _seqs(list(core.history)) == [4, 5] and core.buffered == 2
    assert core.dropped == 0 and core.stats() == {"type": "stats", "buffered": 2, "dropped": 0}


def test_handshake_resends_after_last_seq_and_keeps_the_resume_key() -> None:
    core = _core(max_frames=4)
    hello = core.hello({"name": "node one", "node": "ignored"})
    assert hello == {"name": "node one", "type": "announce", "session": "s-1", "node": "n1"}
    for i in range(6):
        core.add("request", encode(i))
    resend = core.welcome({"type": "welcome", "session": "s-1", "last_seq": 0, "resume_key": "k"})
    assert _seqs(resend.frames) == [3, 4, 5, 6] and resend.lost == 2
    assert core.connects == 1 and core.resume_key == "k" and core.sent == 0
    core.mark_sent(6)
    assert core.hello({})["resume_key"] == "k"
    resend = core.welcome({"type": "welcome", "session": "s-1", "last_seq": 5})
    assert _seqs(resend.frames) == [6] and resend.lost == 0 and core.resume_key == "k"
    assert core.welcome({"type": "welcome", "last_seq": 6}).frames == []


def test_anything_but_a_welcome_is_refused() -> None:
    core = _core()
    with pytest.raises(Refused):
        core.welcome({"type": "error", "detail": "bad token"})
    with pytest.raises(ConnectionError):
        core.welcome(["not", "a", "dict"])
    assert core.connects == 0


def test_stats_say_what_waits_and_what_was_lost() -> None:
    core = _core(max_frames=2)
    for i in range(4):
        core.add("request", encode(i))
    core.hole()
    assert core.stats() == {"type": "stats", "buffered": 2, "dropped": 3}
