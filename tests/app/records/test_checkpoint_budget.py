"""Checkpoints and live rows keep to their byte budget (app.db.checkpoint_codec's clock:
each one is followed by at least RATIO times its size in stored frames before the next
is due, unless the frame cap comes first). A real engine under a full batch, recorded by
a real Recorder: the clock's estimate of what its frames store is close to what the
database holds, and checkpoints and live rows each take about half that at most. (The
clock once counted an iteration frame as storing a quarter of its text, from before
iteration frames went into compressed blocks, which store about a tenth: it counted the
frames ~1.7 times what they store, and checkpoints and live rows took that much more.)"""

from __future__ import annotations

import json
import random
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import queries
from app.db.checkpoint_codec import CheckpointClock
from app.db.models import CheckpointRecord, EventRecord, FrameBlockRecord, LiveRowsRecord
from engine.config import CacheConfig, EngineConfig, SchedulerConfig
from engine.request import SamplingParams
from tests.app.records.helpers import settle, start_recording

SID = "s-budget-1"


def _record_full_batches(sessions: sessionmaker[Session]) -> None:
    """900 steps of up to 96 requests running (iteration frames of several kB)."""
    config = EngineConfig(
        SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=96, max_model_len=512),
        CacheConfig(block_size=8, num_gpu_blocks=2048),
    ).validate()
    hub, recorder, engine = start_recording(sessions, SID, "budget", config)
    rng = random.Random(5)
    for i in range(900):
        if len(engine.scheduler.running) + len(engine.scheduler.waiting) < 100:
            prompt = [rng.randint(3, 258) for _ in range(rng.randint(8, 60))]
            engine.add_request(f"r{i}", prompt, SamplingParams(max_tokens=rng.randint(60, 200)))
        engine.step()
    hub.close_session(SID)
    settle(recorder)


def _lengths(db: Session, column: Any, where: Any, order: Any) -> list[int]:
    """The stored lengths of `column`, by `order`."""
    return [int(n) for n in db.scalars(select(func.length(column)).where(where).order_by(order))]


def test_checkpoints_and_live_rows_keep_to_their_byte_budget(
    sessions: sessionmaker[Session],
) -> None:
    _record_full_batches(sessions)
    with sessions() as db:
        stored = sum(
            _lengths(
                db,
                FrameBlockRecord.frames,
                FrameBlockRecord.session_id == SID,
                FrameBlockRecord.first_seq,
            )
            + _lengths(db, EventRecord.frame, EventRecord.session_id == SID, EventRecord.seq)
        )
        clock = CheckpointClock(10**9)  # never due: it only counts
        for _, text in queries.iter_frames(db, SID):
            clock.add(json.loads(text)["type"], text)
        checkpoints = _lengths(
            db, CheckpointRecord.state, CheckpointRecord.session_id == SID, CheckpointRecord.seq
        )
        live_rows = _lengths(
            db, LiveRowsRecord.state, LiveRowsRecord.session_id == SID, LiveRowsRecord.seq
        )
    assert 0.8 * stored <= clock.stored_bytes <= 1.2 * stored, (clock.stored_bytes, stored)
    assert len(checkpoints) >= 5 and len(live_rows) >= 20, (checkpoints, live_rows)
    # Each is paid for by the frames after it; the last has none yet.
    budget = stored / CheckpointClock.RATIO
    assert sum(checkpoints[:-1]) <= 1.2 * budget, (sum(checkpoints), stored)
    assert sum(live_rows[:-1]) <= 1.2 * budget, (sum(live_rows), stored)
