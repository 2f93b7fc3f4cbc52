"""Download a recording: GET /api/sessions/{id}/export?format=jsonl|perfetto|mooncake."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import Response, StreamingResponse
from sqlalchemy.orm import Session

from app.api_docs import error_responses
from app.deps import RecordedDbDep, View
from app.records.export import jsonl_lines, perfetto_trace
from app.records.mooncake import mooncake_lines
from engine.mooncake import DEFAULT_BLOCK_TOKENS

router = APIRouter(prefix="/api")
CHUNK_LINES = 500


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


@router.get(
    "/sessions/{session_id}/export",
    dependencies=View,
    tags=["sessions"],
    response_class=Response,
    responses={
        200: {
            "description": "The recording as a file (Content-Disposition: attachment).",
            "content": {"application/x-ndjson": {}, "application/json": {}},
        },
        **error_responses(401, 404, 422),
    },
    summary="Download a recording (JSONL frames or a Perfetto trace)",
)
async def export_session(
    session_id: str,
    db: RecordedDbDep,
    fmt: Annotated[Literal["jsonl", "perfetto", "mooncake"], Query(alias="format")] = "jsonl",
    block_tokens: Annotated[int, Query(ge=1, le=1 << 20)] = DEFAULT_BLOCK_TOKENS,
) -> Response:
    """`jsonl`: the protocol frames; `perfetto`: a Chrome JSON trace; `mooncake`: the
    arrivals as a Mooncake JSONL trace (hash ids over `block_tokens`-token blocks)."""
    if fmt == "perfetto":

        def build() -> str:
            with db() as s:
                return json.dumps(perfetto_trace(s, session_id), separators=(",", ":"))

        body = await asyncio.to_thread(build)
        return Response(
            body, media_type="application/json", headers=_attachment(session_id, ".perfetto.json")
        )

    s = db()
    try:
        if fmt == "mooncake":
            lines = await asyncio.to_thread(mooncake_lines, s, session_id, block_tokens)
        else:
            lines = await asyncio.to_thread(jsonl_lines, s, session_id)
    except ValueError as exc:  # a block size this recording cannot give
        s.close()
        raise HTTPException(422, str(exc)) from None
    except BaseException:
        s.close()
        raise
    return StreamingResponse(
        _chunks(s, lines),
        media_type="application/x-ndjson",
        headers=_attachment(session_id, ".mooncake.jsonl" if fmt == "mooncake" else ".jsonl"),
    )
