"""Export a recording: its protocol frames as JSONL, or a Chrome JSON trace for Perfetto.

The JSONL file is a header line, then every frame exactly as it was recorded (the encoded
text, one per line, in seq order); `app.records.importer` reads it back. The trace's tracks are
documented in docs/export.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, TextIO

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import SessionRecord
from app.db.queries import get_session, iter_frames
from app.records.trace import TraceBuilder

EXPORT_FORMAT_VERSION = 1


def session_header(db: Session, session_id: str) -> dict[str, Any]:
    """The header line: the session row (with meta and config). Raises NotFound."""
    row = get_session(db, session_id)
    meta = db.scalar(select(SessionRecord.meta).where(SessionRecord.id == session_id))
    return {"batchscope": EXPORT_FORMAT_VERSION, "session": {**row, "meta": meta or {}}}


def jsonl_lines(db: Session, session_id: str) -> Iterator[str]:
    """The export's lines, newline included. Raises NotFound now, before the first line."""
    header = json.dumps(session_header(db, session_id), separators=(",", ":"))

    def lines() -> Iterator[str]:
        yield header + "\n"
        for _seq, text in iter_frames(db, session_id):
            yield text + "\n"

    return lines()


def export_jsonl(db: Session, session_id: str, out: TextIO) -> int:
    """Write the header and every frame to `out`; returns the number of frames."""
    count = -1
    for count, line in enumerate(jsonl_lines(db, session_id)):  # noqa: B007
        out.write(line)
    return count


def perfetto_trace(db: Session, session_id: str) -> dict[str, Any]:
    """The recording as a Chrome JSON trace (one track per request, counter tracks)."""
    row = get_session(db, session_id)
    builder = TraceBuilder(row["name"] or session_id)
    for _seq, text in iter_frames(db, session_id):
        frame = json.loads(text)
        builder.add(frame["type"], frame["data"])
    trace = builder.finish()
    trace["otherData"] = {
        "session": session_id,
        "name": row["name"],
        "runner": row["runner"],
        "model": row["model"],
        "steps": row["steps"],
    }
    return trace
