"""Download a recording: GET /api/sessions/{id}/export?format=jsonl|perfetto."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import Response, StreamingResponse
from sqlalchemy.orm import Session, sessionmaker

from app.db.queries import NotFound
from app.records.export import jsonl_lines, perfetto_trace
from app.security import require_view

router = APIRouter(prefix="/api")
View = [Depends(require_view)]
CHUNK_LINES = 500


def _db(request: Request) -> sessionmaker[Session]:
    db: sessionmaker[Session] = request.app.state.db
    return db


def _attachment(session_id: str, suffix: str) -> dict[str, str]:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", session_id)
    return {"Content-Disposition": f'attachment; filename="{safe}{suffix}"'}


def _chunks(db: Session, lines: Iterator[str]) -> Iterator[str]:
    """Group lines (fewer, larger writes) and close the session when the stream ends."""
    try:
        buf: list[str] = []
        for line in lines:
            buf.append(line)
            if len(buf) >= CHUNK_LINES:
                yield "".join(buf)
                buf.clear()
        if buf:
            yield "".join(buf)
    finally:
        db.close()


@router.get("/sessions/{session_id}/export", dependencies=View)
async def export_session(
    session_id: str,
    request: Request,
    fmt: Annotated[Literal["jsonl", "perfetto"], Query(alias="format")] = "jsonl",
) -> Response:
    sessions = _db(request)
    if fmt == "perfetto":

        def build() -> str:
            with sessions() as db:
                return json.dumps(perfetto_trace(db, session_id), separators=(",", ":"))

        try:
            body = await asyncio.to_thread(build)
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from None
        return Response(
            body, media_type="application/json", headers=_attachment(session_id, ".perfetto.json")
        )

    db = sessions()
    try:
        lines = await asyncio.to_thread(jsonl_lines, db, session_id)
    except NotFound as exc:
        db.close()
        raise HTTPException(404, str(exc)) from None
    return StreamingResponse(
        _chunks(db, lines),
        media_type="application/x-ndjson",
        headers=_attachment(session_id, ".jsonl"),
    )
