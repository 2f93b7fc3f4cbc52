"""Iteration frames are stored in blocks cut at BLOCK_FRAMES frames and BLOCK_BYTES of
text, and read back exactly, in order, over any range: a real engine under a full batch
(frames of several kB each) written by write_batch into both backends."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

from sqlalchemy import event, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import queries, writes
from app.db.frame_codec import unpack_block
from app.db.migrate import upgrade
from app.db.models import FrameBlockRecord
from app.db.session import make_engine
from app.db.writes import Frame, write_batch
from app.live.hub import EventHub
from engine.config import CacheConfig, EngineConfig, SchedulerConfig
from engine.engine import Engine
from engine.request import SamplingParams
from engine.runner.sim import SimRunner
from protocol.codes import FrameType
from tests.app.records.helpers import HubPublisher, open_sim_session

SID = "s-blocks-1"


def _big_frames() -> list[Frame]:
    """A session whose iteration frames schedule up to 96 requests a step (kBs each)."""
    config = EngineConfig(
        SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=96, max_model_len=512),
        CacheConfig(block_size=8, num_gpu_blocks=2048),
    ).validate()
    hub = EventHub()
    frames: list[Frame] = []

    def keep(session: str, frame_type: str, seq: int, data: Any, text: str) -> None:
        frames.append(Frame(session, frame_type, seq, data, text))

    hub.add_listener(keep)
    runner = SimRunner()
    open_sim_session(hub, SID, "blocks", config, runner)
    engine = Engine(config, runner, HubPublisher(hub, SID))
    rng = random.Random(3)
    for i in range(500):
        if i < 96 or len(engine.scheduler.running) < 96:
            prompt = [rng.randint(3, 258) for _ in range(rng.randint(8, 40))]
            engine.add_request(f"r{i}", prompt, SamplingParams(max_tokens=rng.randint(150, 250)))
        engine.step()
    hub.close_session(SID)
    return frames


def test_blocks_cut_by_bytes_read_back_exactly(sessions: sessionmaker[Session]) -> None:
    frames = _big_frames()
    iterations = [(f.seq, f.text) for f in frames if f.type == FrameType.ITERATION]
    assert sum(len(t) for _, t in iterations) > 4 * writes.BLOCK_BYTES
    with sessions() as db:
        write_batch(db, frames, [])
        db.commit()
    with sessions() as db:
        stored = db.execute(
            select(FrameBlockRecord.first_seq, FrameBlockRecord.last_seq, FrameBlockRecord.frames)
            .where(FrameBlockRecord.session_id == SID)
            .order_by(FrameBlockRecord.first_seq)
        ).all()
        blocks = [unpack_block(b.frames) for b in stored]
        # Every iteration frame in exactly one block, in seq order, each block's bounds
        # its own first and last frame.
        assert [f for block in blocks for f in block] == iterations
        for (first, last, _), block in zip(stored, blocks, strict=True):
            assert (first, last) == (block[0][0], block[-1][0])
        # Cut by bytes: more blocks than 128-frame ones would make, each within the cap
        # unless it holds one frame, and none cut before it had to be.
        assert len(blocks) > -(-len(iterations) // writes.BLOCK_FRAMES)
        assert len(blocks) > queries.BLOCK_PAGE  # reading them pages
        sizes = [sum(len(t) + 1 for _, t in block) for block in blocks]
        cap = writes.BLOCK_BYTES
        for block, size in zip(blocks, sizes, strict=True):
            assert size <= cap or len(block) == 1
        for (block, nxt), size in zip(itertools.pairwise(blocks), sizes, strict=False):
            assert len(block) == writes.BLOCK_FRAMES or size + len(nxt[0][1]) > cap
        # What a reader gets back: every frame, in order, whole or from any range.
        everything = [(f.seq, f.text) for f in frames]
        assert list(queries.iter_frames(db, SID)) == everything
        rng = random.Random(5)
        last = everything[-1][0]
        for _ in range(25):
            after, upto = sorted(rng.sample(range(last + 1), 2))
            want = [(s, t) for s, t in everything if after < s <= upto]
            assert list(queries.iter_frames(db, SID, after, upto)) == want, (after, upto)


def test_a_seek_finds_its_blocks_by_their_key_in_sqlite(tmp_path: Path) -> None:
    # What SQLite plans for the frames of a seek's range: each block by the primary key
    # (session, first_seq). Ordered by last_seq, it walked that index through every block
    # of the session instead (30-110 ms a seek in a 100,000-request recording).
    url = f"sqlite:///{tmp_path / 'blocks.db'}"
    upgrade(url)
    engine = make_engine(url)
    frames = _big_frames()
    with Session(engine) as db:
        write_batch(db, frames, [])
        db.commit()
    statements: list[tuple[str, Any]] = []

    def seen(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if "frame_blocks.frames" in statement:
            statements.append((statement, params))

    event.listen(engine, "before_cursor_execute", seen)
    last = frames[-1].seq
    with Session(engine) as db:
        got = list(queries.iter_frames(db, SID, last // 2, last // 2 + 40))
    event.remove(engine, "before_cursor_execute", seen)
    assert got and statements
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        for statement, params in statements:
            plan = [row[-1] for row in raw.execute("EXPLAIN QUERY PLAN " + statement, params)]
            assert any("first_seq=?" in step for step in plan), plan
    engine.dispose()
