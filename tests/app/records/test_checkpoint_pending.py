"""Checkpoints of a session with a long waiting queue store the never-scheduled requests
as their arrival numbers (app.db.checkpoint_codec) and give back exactly the fold's
state: every stored checkpoint decodes to what an independent fold of the frames has at
its seq, rows in the same order; and a seek from them equals that fold."""

from __future__ import annotations

import asyncio
import json
import random
import zlib
from base64 import b64decode

from sqlalchemy import or_, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import checkpoint_queue, queries
from app.db.checkpoint_codec import PREFIX, decode_checkpoint, encode_checkpoint
from app.db.live_rows import PENDING_APART
from app.db.models import CheckpointRecord, RequestRecord
from app.db.request_page import request_page
from app.frames.fold import SessionState
from app.frames.rows import new_row
from app.live.hub import EventHub
from app.records.recorder import Recorder
from app.request_table import clear_live_cache, live_rows_at, parse_query, select_rows
from engine.engine import Engine
from engine.request import SamplingParams
from engine.runner.sim import SimRunner
from tests.app.records.conftest import NewUrl, open_sessions
from tests.app.records.helpers import (
    HubPublisher,
    busy_config,
    fold_at_steps,
    open_sim_session,
    start_recording,
)
from tests.app.records.test_request_pages_queue import SID, _record


def _plain(data: object) -> object:
    """As JSON gives it back (tuples become lists)."""
    return json.loads(json.dumps(data))


def _stored_json(text: str) -> dict[str, object]:
    data: dict[str, object] = json.loads(zlib.decompress(b64decode(text[len(PREFIX) :])))
    return data


def _check(sessions: sessionmaker[Session], sid: str = SID) -> tuple[int, int, int]:
    """Every stored checkpoint of `sid` decodes to the fold at its seq, and a seek from it
    equals that fold. Returns (compacted, apart, stored) checkpoints."""
    with sessions() as db:
        stored = {
            r.seq: r.state
            for r in db.scalars(select(CheckpointRecord).where(CheckpointRecord.session_id == sid))
        }
        compacted = apart = 0
        state = SessionState(sid, {})
        for seq, text in queries.iter_frames(db, sid):
            frame = json.loads(text)
            state.apply(frame["type"], seq, frame["data"])
            if seq not in stored:
                continue
            want = _plain(state.to_checkpoint())
            got = decode_checkpoint(stored[seq])
            assert checkpoint_queue.complete(db, sid, got), seq
            assert got == want, seq
            assert list(got["requests"]) == list(state.requests), seq  # the fold's order
            raw = _stored_json(stored[seq])
            rows = raw["requests"]
            assert isinstance(rows, dict)
            if "pending_rows" in raw:
                compacted += 1
                assert sum(1 for r in rows.values() if isinstance(r, int)) >= 100, seq
            if "left_out" in raw:
                # The never-scheduled rows were left to the requests table.
                apart += 1
                left_out = raw["left_out"]
                assert isinstance(left_out, dict)
                assert left_out["count"] >= PENDING_APART, seq
                assert len(rows) + left_out["count"] == len(state.requests), seq
            # A seek to the checkpoint's own step folds from it: the same state.
            seek = queries.state_at_seq(db, sid, seq)
            assert _plain(seek.to_checkpoint()) == want, seq
    return compacted, apart, len(stored)


def test_checkpoints_of_a_long_queue_decode_to_the_fold(new_database: NewUrl) -> None:
    for sessions in open_sessions(new_database()):
        _record(sessions)
        compacted, apart, stored = _check(sessions)
        # The queue was long at most checkpoints: the test saw the compact forms.
        assert compacted + apart >= stored // 2 >= 2, (compacted, apart, stored)
        assert apart >= 2, apart


def _record_steady_arrivals(sessions: sessionmaker[Session], sid: str) -> None:
    """A queue longer than PENDING_APART before the first step, then one arrival before
    each of 600 steps."""
    rng = random.Random(11)
    hub, recorder, engine = start_recording(sessions, sid, "an arrival before every step")
    for n in range(PENDING_APART + 650):
        prompt = [rng.randint(3, 258) for _ in range(30)]
        engine.add_request(f"a{n}", prompt, SamplingParams(max_tokens=rng.randint(1, 30)))
        if n >= PENDING_APART + 50:
            engine.step()
    hub.close_session(sid)
    asyncio.run(recorder.flush())
    assert recorder.failures == 0, recorder.last_error


def test_checkpoints_under_an_arrival_before_every_step_leave_the_queue_out(
    new_database: NewUrl,
) -> None:
    """A flat-out trace: a request arrives before every step, so the frame that opens a
    step is an arrival mark. Each checkpoint (taken at a step's end, the queue long from
    the start) still leaves the never-scheduled rows to the requests table -- a whole one
    walks the queue -- and decodes to the fold."""
    sid = "s-steady-arrivals"
    for sessions in open_sessions(new_database()):
        _record_steady_arrivals(sessions, sid)
        compacted, apart, stored = _check(sessions, sid)
        # All but the first: it falls amid the arrivals before the first step, where no
        # step has ended yet (stored whole, compacted). Each arrival counted before the
        # checkpoint made every one whole: (7, 0, 7).
        assert stored >= 4, stored
        assert (compacted, apart) == (1, stored - 1), (compacted, apart, stored)


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


def _record_closed_with_a_queue(sessions: sessionmaker[Session], sid: str) -> None:
    """A burst far beyond what the engine serves, closed while most of it still waits."""
    rng = random.Random(3)
    hub = EventHub()
    recorder = Recorder(hub, sessions)
    config = busy_config()
    runner = SimRunner()
    open_sim_session(hub, sid, "closed with a queue", config, runner)
    engine = Engine(config, runner, HubPublisher(hub, sid))
    for n in range(PENDING_APART + 200):
        prompt = [rng.randint(3, 258) for _ in range(30)]
        engine.add_request(f"c{n}", prompt, SamplingParams(max_tokens=rng.randint(1, 30)))
    for _ in range(40):
        engine.step()
    hub.close_session(sid)
    asyncio.run(recorder.flush())
    assert recorder.failures == 0, recorder.last_error


def test_the_last_step_of_a_recording_closed_with_a_long_queue_pages_apart(
    new_database: NewUrl,
) -> None:
    """Live rows are taken when the session closes, so its last step is paged like any
    other (the never-scheduled left to the requests table), with the fold's rows."""
    sid = "s-closed-queue"
    for sessions in open_sessions(new_database()):
        _record_closed_with_a_queue(sessions, sid)
        with sessions() as db:
            last = queries.get_session(db, sid)["steps"] - 1
            [(_, state)] = list(fold_at_steps(db, sid, [last]))
            want = state.request_rows()
            assert sum(1 for r in want if r["status"] == "WAITING") >= PENDING_APART
            clear_live_cache()
            at = live_rows_at(db, sid, last)
            assert at.pending is not None and at.pending.size is not None
            assert len(at.rows) + at.pending.size == sum(
                1 for r in want if r["status"] not in ("FINISHED", "REJECTED")
            )
            for params in ({}, {"status": "waiting", "sort": "-arrival"}, {"sort": "ttft"}):
                query = parse_query({**params, "limit": "60"})
                total, page = request_page(db, sid, last, at.rows, query, at.pending)
                expected = select_rows(want, query)
                assert total == len(select_rows(want, parse_query(params)))
                assert [r["req"] for r in page] == [r["req"] for r in expected], params
                assert [r["status"] for r in page] == [r["status"] for r in expected]


def _index_of(state: SessionState) -> tuple[list[str], set[str]]:
    """The never-scheduled rows (in the fold's order) and the started ones, by their
    fields: what the fold's index must hold."""
    done = ("FINISHED", "REJECTED")
    unscheduled = [
        r
        for r, row in state.requests.items()
        if row["status"] == "WAITING"
        and row["first_scheduled_step"] is None
        and row["finish_step"] is None
    ]
    live = {r for r, row in state.requests.items() if row["status"] not in done}
    return unscheduled, live - set(unscheduled)


def test_the_folds_index_holds_the_never_scheduled_and_started_rows(
    new_database: NewUrl,
) -> None:
    """At every frame of a recording with preemptions, an abort while waiting and a queue
    of hundreds, the fold's index (app.frames.row_index) is what the rows say; and after a
    seek (a checkpoint, whole or with rows left out, and the frames after it) too."""
    for sessions in open_sessions(new_database()):
        _record(sessions)
        with sessions() as db:
            state = SessionState(SID, {})
            longest = 0
            for n, (seq, text) in enumerate(queries.iter_frames(db, SID)):
                frame = json.loads(text)
                state.apply(frame["type"], seq, frame["data"])
                unscheduled, started = _index_of(state)
                assert list(state.index.unscheduled) == unscheduled, seq
                assert set(state.index.started) == started, seq
                longest = max(longest, len(unscheduled))
                if n % 97 == 0:
                    seek = queries.state_at_seq(db, SID, seq)
                    assert list(seek.index.unscheduled) == unscheduled, seq
                    assert set(seek.index.started) == started, seq
            assert longest >= PENDING_APART
            assert state.num_requests > 600


def test_a_checkpoint_whose_left_out_rows_the_table_no_longer_gives_is_passed_over(
    new_database: NewUrl,
) -> None:
    """A seek to a checkpoint whose left-out rows the requests table does not give back
    (one of them since marked scheduled before the checkpoint's step) folds from an
    earlier checkpoint instead: the same state as the fold of the frames."""
    for sessions in open_sessions(new_database()):
        _record(sessions)
        with sessions.begin() as db:
            apart = [
                r
                for r in db.scalars(
                    select(CheckpointRecord).where(CheckpointRecord.session_id == SID)
                )
                if "left_out" in _stored_json(r.state)
            ]
            assert len(apart) >= 2
            target = apart[len(apart) // 2]
            R = RequestRecord
            newest = db.scalars(
                select(R)
                .where(
                    R.session_id == SID,
                    R.arrival_seq <= target.seq,
                    R.arrival_step <= target.step,
                    or_(R.first_scheduled_step.is_(None), R.first_scheduled_step > target.step),
                    or_(R.finish_step.is_(None), R.finish_step > target.step),
                )
                .order_by(R.arrival_seq.desc())
                .limit(1)
            ).one()
            newest.first_scheduled_step = target.step  # as if scheduled by then
        with sessions() as db:
            data = decode_checkpoint(target.state)
            assert not checkpoint_queue.complete(db, SID, data)
            state = SessionState(SID, {})
            for seq, text in queries.iter_frames(db, SID, 0, target.seq):
                frame = json.loads(text)
                state.apply(frame["type"], seq, frame["data"])
            want = _plain(state.to_checkpoint())
            seek = queries.state_at_seq(db, SID, target.seq)
            assert _plain(seek.to_checkpoint()) == want
            assert list(seek.requests) == list(state.requests)
