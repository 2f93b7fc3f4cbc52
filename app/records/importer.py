"""Import a JSONL export (app.records.export) as a recorded session, identical to the original.

Every line is checked before anything is written (header, envelope, consecutive seq,
frame data against the protocol models); then all frames go in one transaction through
the recorder's own write path, with checkpoints folded the way the recorder folds them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from app.db import done_counts
from app.db.live_rows import LiveRowsTaker
from app.db.models import SessionRecord
from app.db.planner_stats import PlannerStats
from app.db.recording_fold import RecordingFold, Stored
from app.db.session import write_transaction
from app.db.writes import (
    Frame,
    write_batch,
    write_live_rows,
    write_segments,
)
from app.frames.fold import SessionState
from app.frames.validate import FRAME_MODELS, validate_frame
from app.records.recorder import CHECKPOINT_EVERY
from protocol.codes import RECORDED_FRAME_TYPES, FrameType, SessionEvent
from protocol.envelope import PROTOCOL_VERSION

ENVELOPE_KEYS = {"v", "type", "session", "seq", "data"}
OPTIONAL_KEYS = {"ts"}
WRITE_CHUNK = 2000
SESSION_FIELDS = (
    "name",
    "source",
    "runner",
    "model",
    "device",
    "simulated",
    "config",
    "meta",
    "started_at",
    "ended_at",
)


class ImportFormatError(ValueError):
    """The file is not an export we can bring back; the message names the line."""


class SessionHeader(BaseModel):
    """The session row as exported; limits match the `sessions` table's columns."""

    model_config = ConfigDict(extra="allow")
    id: str = Field(min_length=1, max_length=128)
    name: str = Field("", max_length=200)
    source: str = Field("", max_length=64)
    runner: str = Field("", max_length=32)
    model: str = Field("", max_length=300)
    device: str = Field("", max_length=32)
    simulated: bool = False
    config: dict[str, Any] = Field(default_factory=dict)
    meta: dict[str, Any] = Field(default_factory=dict)
    started_at: float | None = None
    ended_at: float | None = None


class ExportHeader(BaseModel):
    model_config = ConfigDict(extra="allow")
    batchscope: Literal[1]
    session: SessionHeader


def _pydantic_message(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    msg = first["msg"]
    msg = msg[:1].lower() + msg[1:]
    return f"{where}: {msg}" if where else msg


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text without its line break); a file we cannot read is an OSError."""
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ImportFormatError(f"line {number}: not UTF-8 text") from None
            yield number, text.removesuffix("\n").removesuffix("\r")


def _header(number: int, text: str) -> SessionHeader:
    where = f"line {number}: header"
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImportFormatError(
            f"{where}: not valid JSON ({exc.msg}, column {exc.colno})"
        ) from None
    if not isinstance(obj, dict) or "batchscope" not in obj:
        raise ImportFormatError(
            f"{where}: missing (the first line must be the export header "
            '{"batchscope": 1, "session": {...}})'
        )
    try:
        return ExportHeader.model_validate(obj).session
    except ValidationError as exc:
        raise ImportFormatError(f"{where}: {_pydantic_message(exc)}") from None


class _FrameChecker:
    """Checks one frame line after another: envelope, seq, steps and (optionally) data."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.seq = 0
        self.step = -1

    def check(self, number: int, text: str, validate_data: bool) -> tuple[str, int, Any]:
        def fail(message: str) -> ImportFormatError:
            return ImportFormatError(f"line {number}: {message}")

        if not text.strip():
            raise fail("empty line (expected a frame)")
        try:
            frame = json.loads(text)
        except json.JSONDecodeError as exc:
            raise fail(f"not valid JSON ({exc.msg}, column {exc.colno})") from None
        if not isinstance(frame, dict):
            raise fail("a frame must be a JSON object")
        missing = ENVELOPE_KEYS - frame.keys()
        extra = frame.keys() - ENVELOPE_KEYS - OPTIONAL_KEYS
        if missing or extra:
            which = f"missing {sorted(missing)}" if missing else f"unknown keys {sorted(extra)}"
            raise fail(f"frame envelope: {which}")
        if frame["v"] != PROTOCOL_VERSION or isinstance(frame["v"], bool):
            raise fail(f"protocol version {frame['v']!r} (expected {PROTOCOL_VERSION})")
        ts = frame.get("ts")
        if ts is not None and (not isinstance(ts, int | float) or isinstance(ts, bool)):
            raise fail(f"ts {ts!r} is not a number")
        ftype = frame["type"]
        if ftype not in RECORDED_FRAME_TYPES:
            raise fail(f"frame type {ftype!r} (expected one of {', '.join(RECORDED_FRAME_TYPES)})")
        if frame["session"] != self.session_id:
            raise fail(f"session {frame['session']!r} is not the header's {self.session_id!r}")
        seq = frame["seq"]
        if not isinstance(seq, int) or isinstance(seq, bool) or seq != self.seq + 1:
            raise fail(
                f"seq {seq!r} where {self.seq + 1} was expected (seq counts up by one from 1)"
            )
        data = frame["data"]
        if not isinstance(data, dict):
            raise fail(f"{ftype} frame: data must be an object")
        if validate_data and ftype in FRAME_MODELS:
            try:
                validate_frame(ftype, data)
            except ValidationError as exc:
                raise fail(f"{ftype} frame: {_pydantic_message(exc)}") from None
        if ftype == FrameType.SESSION and not isinstance(data.get("event"), str):
            raise fail("session frame: event: field required")
        if ftype == FrameType.ITERATION:
            if not isinstance(data.get("step"), int) or data["step"] <= self.step:
                raise fail(f"iteration step {data.get('step')!r} does not follow step {self.step}")
            self.step = data["step"]
        self.seq = seq
        return ftype, seq, data


def _validate(path: Path) -> SessionHeader:
    lines = _lines(path)
    first = next(lines, None)
    if first is None:
        raise ImportFormatError("line 1: header: missing (the file is empty)")
    header = _header(*first)
    checker = _FrameChecker(header.id)
    for number, text in lines:
        checker.check(number, text, validate_data=True)
    if checker.seq == 0:
        raise ImportFormatError("line 2: no frames after the header")
    return header


def _exists(db: Session, session_id: str) -> ImportFormatError | None:
    if db.get(SessionRecord, session_id) is None:
        return None
    return ImportFormatError(
        f"line 1: session {session_id!r} already exists in this database "
        "(delete it first to import it again)"
    )


def _write_chunk(db: Session, batch: list[Frame], out: Stored) -> None:
    # No autoflush: write_batch looks up each new request row, and a flush before every
    # lookup costs more than the writes (rows are unique per chunk; chunks are flushed).
    with db.no_autoflush:
        write_batch(db, batch, out.checkpoints)
        if out.live_rows:
            write_live_rows(db, out.live_rows)
    db.flush()
    if out.ended:  # the replay Gantt's segments of the requests done (as the recorder's)
        write_segments(db, out.ended)
    out.checkpoints.clear()
    out.live_rows.clear()
    out.ended.clear()


def _write(db: Session, path: Path, header: SessionHeader) -> None:
    """All frames (one transaction, owned by the caller) plus the recorder's checkpoints
    and live rows (app.db.recording_fold)."""
    sid = header.id
    lines = _lines(path)
    next(lines)
    checker = _FrameChecker(sid)
    fold: RecordingFold | None = None
    batch: list[Frame] = []
    out = Stored()
    for number, text in lines:
        ftype, seq, data = checker.check(number, text, validate_data=False)
        if fold is None:
            # The hub opens a session's state with the meta its "opened" frame carries.
            opened = ftype == FrameType.SESSION and data["event"] == SessionEvent.OPENED
            meta = (
                {k: v for k, v in data.items() if k != "event"}
                if opened
                else {"name": header.name, "config": header.config}
            )
            fold = RecordingFold(SessionState(sid, meta), CHECKPOINT_EVERY, LiveRowsTaker())
        fold.take(ftype, seq, data, text, out)
        batch.append(Frame(sid, ftype, seq, data, text))
        if len(batch) >= WRITE_CHUNK:
            _write_chunk(db, batch, out)
            batch = []
    _write_chunk(db, batch, out)
    # The exported row wins over what the frames imply (a rename, the real end time).
    rec = db.get(SessionRecord, sid)
    assert rec is not None
    for key in SESSION_FIELDS:
        value = getattr(header, key)
        if key in header.model_fields_set and (value is not None or key == "ended_at"):
            setattr(rec, key, value)
    db.flush()
    final = done_counts.final_step(rec.num_steps)  # as the writer stores them
    done_counts.store(db, done_counts.read(db, sid, final), rec.last_seq)


def import_jsonl(db_sessionmaker: sessionmaker[Session], path: str | Path) -> str:
    """Import an export file; returns the session id. Raises ImportFormatError (nothing
    written) for a malformed file or a session id that is already recorded, and OSError
    for a file that cannot be read."""
    path = Path(path)
    header = _validate(path)
    with db_sessionmaker() as db:
        if (error := _exists(db, header.id)) is not None:
            raise error
    try:
        with write_transaction(db_sessionmaker) as db:
            if (error := _exists(db, header.id)) is not None:
                raise error
            _write(db, path, header)
    except IntegrityError as exc:  # a concurrent import of the same session
        raise ImportFormatError(f"session {header.id!r}: {exc.orig}") from None
    PlannerStats(db_sessionmaker).tick(now=True)  # on PostgreSQL: a replay comes next
    return header.id
