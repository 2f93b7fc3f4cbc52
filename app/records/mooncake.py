"""A recording's arrivals as a Mooncake-style JSONL trace (engine/mooncake.py), for any
recording: ours, a re-run, or a vLLM node's.

One line a request, in arrival order: `timestamp` (ms from the session's start),
`input_length`, `output_length` (the tokens it produced when it finished by a stop or
its length, else the `max_tokens` it asked for) and `hash_ids` from its prompt's blocks
(equal content after an equal prefix, equal id), numbered in order of first appearance.
A vLLM node's arrivals carry no prompt but its blocks' keys (`prompt_block_hashes`, over
`prompt_block_tokens`-token blocks: protocol.blocks), which serve at that block size or
any multiple of it (another is a ValueError). An arrival with neither (a producer that
sent no prompt) gets fresh ids for every block: nothing is known to be shared.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.frame_codec import unpack_frame
from app.db.models import EventRecord, RequestRecord
from app.db.queries import get_session
from engine.mooncake import DEFAULT_BLOCK_TOKENS, BlockNumbering, trace_line
from engine.trace_prompt import TracePrompt
from protocol.blocks import PROMPT_BLOCK_TOKENS, coarser
from protocol.codes import FrameType, RequestMark

COMPLETED = ("stop", "length")


def _output_lengths(db: Session, session_id: str) -> dict[str, int]:
    """Tokens produced by each request that completed (stop or length)."""
    rows = db.execute(
        select(RequestRecord.req_id, RequestRecord.num_output_tokens).where(
            RequestRecord.session_id == session_id,
            RequestRecord.finish_reason.in_(COMPLETED),
        )
    )
    return {req: n for req, n in rows if n > 0}


def _ids(
    numbering: BlockNumbering, detail: dict[str, Any], prompt: list[int] | None, n_in: int
) -> list[int]:
    if prompt:
        return numbering.ids(prompt)
    hashes = detail.get("prompt_block_hashes")
    if hashes:
        size = int(detail.get("prompt_block_tokens") or PROMPT_BLOCK_TOKENS)
        keys = coarser(hashes, size, n_in, numbering.block_tokens)
        return numbering.keyed(bytes.fromhex(h) for h in keys)
    return numbering.fresh(n_in)


def mooncake_lines(
    db: Session, session_id: str, block_tokens: int = DEFAULT_BLOCK_TOKENS
) -> Iterator[str]:
    """The trace's lines, newline included. Raises NotFound (or ValueError: a block size
    the recording cannot give) now, before the first line."""
    get_session(db, session_id)
    if block_tokens < 1:
        raise ValueError("block_tokens: must be at least 1")
    produced = _output_lengths(db, session_id)
    stored = db.scalars(
        select(EventRecord.frame)
        .where(EventRecord.session_id == session_id, EventRecord.type == FrameType.REQUEST)
        .order_by(EventRecord.seq)
    )
    numbering = BlockNumbering(block_tokens)
    rows: list[tuple[float, int, int, int, list[int]]] = []
    for n, text in enumerate(stored):
        data = json.loads(unpack_frame(text))["data"]
        if data["kind"] != RequestMark.ARRIVED:
            continue
        detail = data.get("detail") or {}
        prompt = detail.get("prompt_token_ids")
        traced = detail.get("trace_prompt")
        if traced is not None and prompt is None:
            # A trace's request (engine.trace_prompt): its tokens, made from its chain.
            prompt = list(TracePrompt.from_dict(traced))
        n_in = len(prompt) if prompt else int(detail.get("num_prompt_tokens") or 0)
        if n_in < 1:
            continue
        ids = _ids(numbering, detail, prompt, n_in)
        n_out = produced.get(data["req"]) or int(detail.get("max_tokens") or 1)
        rows.append((float(data["t"]), n, n_in, n_out, ids))

    def lines() -> Iterator[str]:
        # Ids are renumbered by first appearance in the trace's (time) order.
        renumber: dict[int, int] = {}
        for t, _n, n_in, n_out, ids in sorted(rows, key=lambda r: (r[0], r[1])):
            out = [renumber.setdefault(h, len(renumber)) for h in ids]
            yield trace_line(t * 1000.0, n_in, n_out, out)

    return lines()
