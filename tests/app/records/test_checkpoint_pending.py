"""Checkpoints of a session with a long waiting queue store the never-scheduled requests
as their arrival numbers (app.db.checkpoint_codec) and give back exactly the fold's
state: every stored checkpoint decodes to what an independent fold of the frames has at
its seq, rows in the same order; and a seek from them equals that fold."""

from __future__ import annotations

import json
import zlib
from base64 import b64decode

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import queries
from app.db.checkpoint_codec import PREFIX, decode_checkpoint, encode_checkpoint
from app.db.models import CheckpointRecord
from app.frames.fold import SessionState
from app.frames.rows import new_row
from tests.app.records.conftest import NewUrl, open_sessions
from tests.app.records.test_request_pages_queue import SID, _record


def _plain(data: object) -> object:
    """As JSON gives it back (tuples become lists)."""
    return json.loads(json.dumps(data))


def _stored_json(text: str) -> dict[str, object]:
    data: dict[str, object] = json.loads(zlib.decompress(b64decode(text[len(PREFIX) :])))
    return data


def _check(sessions: sessionmaker[Session]) -> None:
    with sessions() as db:
        stored = {
            r.seq: r.state
            for r in db.scalars(select(CheckpointRecord).where(CheckpointRecord.session_id == SID))
        }
        compacted = 0
        state = SessionState(SID, {})
        for seq, text in queries.iter_frames(db, SID):
            frame = json.loads(text)
            state.apply(frame["type"], seq, frame["data"])
            if seq not in stored:
                continue
            want = _plain(state.to_checkpoint())
            got = decode_checkpoint(stored[seq])
            assert got == want, seq
            assert list(got["requests"]) == list(state.requests), seq  # the fold's order
            raw = _stored_json(stored[seq])
            if "pending_rows" in raw:
                compacted += 1
                rows = raw["requests"]
                assert isinstance(rows, dict)
                assert sum(1 for r in rows.values() if isinstance(r, int)) >= 100, seq
            # A seek to the checkpoint's own step folds from it: the same state.
            seek = queries.state_at_seq(db, SID, seq)
            assert _plain(seek.to_checkpoint()) == want, seq
        # The queue was long at most checkpoints: the test saw the compact form.
        assert compacted >= len(stored) // 2 >= 2, (compacted, len(stored))


def test_checkpoints_of_a_long_queue_decode_to_the_fold(new_database: NewUrl) -> None:
    for sessions in open_sessions(new_database()):
        _record(sessions)
        _check(sessions)


def test_only_rows_rebuilt_alike_are_compacted() -> None:
    """A row that differs from a never-scheduled one in anything but its arrival numbers
    (an extra key, a segment, a preemption, a token) is stored whole."""
    state = SessionState("s", {})
    rows = {}
    for i in range(6):
        row = new_row(f"r{i}", 3, 0.5)
        fields = {"num_prompt_tokens": 10 + i, "num_tokens": 10 + i, "max_tokens": 4,
                  "priority": i % 2, "arrived_step": 3, "arrived_t": 0.25 * i,
                  "waiting_reason": "token_budget"}  # fmt: skip
        row.update(fields)  # type: ignore[typeddict-item]
        rows[row["req"]] = row
    rows["r1"]["num_preemptions"] = 1
    rows["r2"]["segments"].append(["prefill", 4, 4, 8])
    rows["r3"]["num_draft_tokens"] = 2
    rows["r4"]["extra"] = True  # type: ignore[typeddict-unknown-key]
    state.requests = rows  # type: ignore[assignment]
    text = encode_checkpoint(state.to_checkpoint())
    raw = _stored_json(text)
    stored = raw["requests"]
    assert isinstance(stored, dict)
    assert [k for k, v in stored.items() if isinstance(v, int)] == ["r0", "r5"]
    assert decode_checkpoint(text) == _plain(state.to_checkpoint())
