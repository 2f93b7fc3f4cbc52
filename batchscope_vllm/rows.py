"""An iteration frame's `scheduled` rows, straight from a vLLM SchedulerOutput.

One row per scheduled request (the bulk of a frame's bytes) is formatted directly as JSON
text (`Rows`), skipping a dict per row and its generic encoding; `encode_data()` splices
the rows into the frame's data. The common row, a plain decode, reuses a cached head.
Both of vLLM's model runners are understood: the V1 runner gets a resumed request as a
cached one flagged in `resumed_req_ids`, the V2 runner (0.33's default; 0.34's only way)
in `scheduled_new_reqs` with the new ones (told apart by the request's own preemption
mark). Without `resumed_req_ids` (0.34) a scheduled request preempted before is resumed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from protocol.codes import Phase
from protocol.envelope import encode

ROW = '{"req":%s,"n":%d,"start":%d,"phase":"%s","prefix_hit":%d,"sample":%s}'
DECODE_TAIL = ',"phase":"decode","prefix_hit":0,"sample":true}'  # after a decode row's start
_PLACEHOLDER = "\x00rows"
_PLACEHOLDER_JSON = json.dumps(_PLACEHOLDER)


class Rows:
    """An iteration frame's `scheduled` list, already JSON text."""

    __slots__ = ("count", "text")

    def __init__(self, rows: list[str]) -> None:
        self.text = "[" + ",".join(rows) + "]"
        self.count = len(rows)

    def __len__(self) -> int:
        return self.count


def encode_data(data: Mapping[str, Any]) -> str:
    """Frame data as compact JSON, with `Rows` spliced in as they are."""
    rows = data.get("scheduled")
    if not isinstance(rows, Rows):
        return encode(data)
    return encode({**data, "scheduled": _PLACEHOLDER}).replace(_PLACEHOLDER_JSON, rows.text, 1)


@dataclass(slots=True)
class Req:
    """What the sender keeps per live request."""

    num_prompt: int
    quoted: str  # the id as a JSON string
    head: str  # a plain decode row up to its start
    num_output: int = 0
    num_preemptions: int = 0
    cached: int | None = None  # prefix-cache hit tokens at first admission
    preempted: bool = False
    output_ids: list[int] = field(default_factory=list)


@dataclass(slots=True)
class Batch:
    """A SchedulerOutput read into what the frame and the waiting reasons need."""

    rows: Rows
    new: list[str]
    resumed: list[str]
    prefill: int
    decode: int
    hits: int
    spec: dict[str, int]
    """Drafts scheduled per request."""
    sampling: dict[str, int]
    """Tokens each sampling request will produce at most (1 + drafts): placeholders."""
    num_decodes: int = 0
    prefill_chunks: int = 0
    largest: tuple[str, int] | None = None
    """The largest prefill chunk (request, tokens)."""


def read_batch(so: Any, reqs: dict[str, Req], in_flight: dict[str, int]) -> Batch:
    """One pass over the scheduled requests; a plain decode (the bulk of a busy step)
    costs a few dict lookups and one string concatenation."""
    starts = {d.req_id: d.num_computed_tokens for d in so.scheduled_new_reqs}
    new_ids = set(starts)
    cached = so.scheduled_cached_reqs
    starts.update(zip(cached.req_ids, cached.num_computed_tokens, strict=False))
    resumed_ids = getattr(cached, "resumed_req_ids", None) or ()
    spec_tokens = getattr(so, "scheduled_spec_decode_tokens", None) or {}
    b = Batch(Rows([]), [], [], 0, 0, 0, {}, {})
    rows: list[str] = []
    append = rows.append
    sampling = b.sampling
    get_start, get_rec = starts.get, reqs.get
    decodes = 0  # plain decodes, added to b.decode and b.num_decodes at the end
    largest = 0
    for req_id, n in so.num_scheduled_tokens.items():
        start = get_start(req_id, 0)
        rec = get_rec(req_id)
        pending = in_flight.get(req_id, 0) if in_flight else 0
        if n == 1 and rec is not None and req_id not in new_ids:
            num_prompt = rec.num_prompt
            if (
                start == num_prompt + rec.num_output + pending - 1
                and start >= num_prompt
                and req_id not in resumed_ids
                and not rec.preempted
            ):
                decodes += 1  # the common case, a plain decode: a cached row head
                append(rec.head + str(start) + DECODE_TAIL)
                sampling[req_id] = 1
                continue
        drafts = len(spec_tokens.get(req_id) or ()) if spec_tokens else 0
        hit = 0
        if req_id in new_ids or req_id in resumed_ids or (rec is not None and rec.preempted):
            hit = start
            b.hits += hit
            if req_id in resumed_ids or (rec is not None and rec.preempted):
                if rec is not None:
                    rec.preempted = False
                b.resumed.append(req_id)
            else:
                b.new.append(req_id)
                if rec is not None and rec.cached is None:
                    rec.cached = hit
        if rec is None:
            quoted, is_prefill, sample = json.dumps(req_id), n > 1, True
        else:
            quoted, known = rec.quoted, rec.num_prompt + rec.num_output
            # Prompt positions, or a recompute of more than the newest token.
            is_prefill = start < rec.num_prompt or start + 1 < known
            sample = start + n >= known + pending
        if is_prefill:
            b.prefill += n
            b.prefill_chunks += 1
            if n > largest:
                largest, b.largest = n, (req_id, n)
            phase = Phase.PREFILL
        else:
            b.decode += n
            b.num_decodes += 1
            phase = Phase.DECODE
        row = ROW % (quoted, n, start, phase, hit, "true" if sample else "false")
        if drafts:
            b.spec[req_id] = drafts
            row = row[:-1] + f',"spec":{drafts}}}'
        if sample:
            b.sampling[req_id] = 1 + drafts
        append(row)
    b.decode += decodes
    b.num_decodes += decodes
    b.rows = Rows(rows)
    return b
