"""A request's whole life, from the recording (folded by app.records.life_fold): every
step it was scheduled, each wait with its reason worded with the step's numbers,
preemptions, the KV blocks it held, its outputs, latency and its text or token ids.

Works the same for a live session (it is recorded as it runs), a replay and after a
restart. Only the request's own steps are read: the frames of the steps it ran (iterations'
primary key is (session, step)), decoding only its slices of each (app.records.
frame_slices), and for the steps it waited the small per-step numbers (step_waits) that
give its reasons (app.records.life_plan).
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from functools import partial

from sqlalchemy.orm import Session

from app.db import queries, request_frames
from app.errors import NotFound
from app.records import frame_slices, life_plan
from app.records.life_fold import LifeFold, latency, status
from app.records.life_types import RequestLifeData

DEFAULT_KEY = '"waiting_default":'
CACHE_ENTRIES = 32
"""Lives kept (a recorded step range never changes; a request still live is keyed by the
session's last seq too): clicking back and forth reads the frames once."""
_CACHE: OrderedDict[tuple[str, str, int, int], RequestLifeData] = OrderedDict()
_LOCK = threading.Lock()


def _scan(db: Session, session_id: str, fold: LifeFold, ranges: list[tuple[int, int]]) -> int:
    """Fold the frames of the step ranges that mention the request; returns how many
    frames were read."""
    needle = json.dumps(fold.req)
    scanned = 0
    for a, b in ranges:
        for text in request_frames.iteration_texts(db, session_id, a, b):
            scanned += 1
            if needle not in text and DEFAULT_KEY not in text:
                continue  # (compact reasons name only the exceptions: it may wait there)
            d = frame_slices.request_slice(text, fold.req, needle)
            seq = frame_slices.seq_of(text)
            if d is None:
                fold.iteration(json.loads(text)["data"], seq=seq)
            else:
                whole = partial(frame_slices.all_scheduled, text, d["scheduled_at"])
                fold.iteration(d, whole, seq)
    return scanned


def _read(db: Session, session_id: str, fold: LifeFold, first: int, last: int) -> int:
    """Fold the request's marks, the frames of the steps it ran and its waits (from the
    steps' numbers where the recording has them: app.records.life_plan)."""
    needle = json.dumps(fold.req)
    for text in request_frames.request_mark_texts(db, session_id, first, last):
        if needle in text:
            frame = json.loads(text)
            d = frame["data"]
            if d["req"] == fold.req:
                fold.mark(d, frame.get("seq"))
    plan = life_plan.plan_reads(fold.marks, first, last)
    if plan is None:
        return _scan(db, session_id, fold, [(first, last)])
    waits = request_frames.step_waits(db, session_id, first, last) if plan.waiting else {}
    scanned = _scan(db, session_id, fold, life_plan.frame_ranges(plan, waits, last))
    for a, b in plan.waiting:
        recorded = fold.wait_steps.get(a)
        numbers = waits.get(a)
        if not numbers or not recorded or recorded[0] != life_plan.reason_at(fold.req, numbers):
            # This producer words its waits otherwise: the frames say.
            unread = [(s, s) for s in range(a, b + 1) if s not in fold.steps_read]
            scanned += _scan(db, session_id, fold, life_plan.merged(unread))
            continue
        for s in range(a, b + 1):
            detail = waits.get(s)
            if s not in fold.steps_read and detail:
                fold.wait_steps[s] = (life_plan.reason_at(fold.req, detail), detail)
    return scanned


def request_life(
    db: Session, session_id: str, req_id: str, upto_step: int | None = None
) -> RequestLifeData:
    """The life of `req_id` in recording `session_id` up to `upto_step` (default: all).
    Raises NotFound for an unknown session or request."""
    t0 = time.perf_counter()
    meta = queries.get_session(db, session_id)
    row = request_frames.request_record(db, session_id, req_id)
    if row is None or row["arrival_step"] is None:
        raise NotFound(f"no request {req_id!r} recorded in session {session_id!r}")
    first = row["arrival_step"]
    last = meta["steps"] - 1 if row["finish_step"] is None else row["finish_step"]
    if last < first and row["finish_step"] is not None:
        # A stop ends a request that arrived after the last step at that step
        # (protocol.lifecycle.stop_marks): its life spans both.
        first, last = last, first
    if upto_step is not None:
        last = min(last, upto_step)
    if last < first:
        raise NotFound(f"request {req_id!r} arrives after step {upto_step}")
    key = (session_id, req_id, last, meta["last_seq"] if row["finish_step"] is None else 0)
    with _LOCK:
        cached = _CACHE.get(key)
        if cached is not None:
            _CACHE.move_to_end(key)
            hit = cached.copy()
            hit["cached"] = True
            return hit
    fold = LifeFold(req_id)
    scanned = _read(db, session_id, fold, first, last)
    life = fold.result()
    config = meta["config"] or {}
    out: RequestLifeData = {
        "session": session_id,
        "req": req_id,
        "upto_step": last,
        "status": status(fold, life["marks"]),
        "request": {
            "num_prompt_tokens": row["num_prompt_tokens"],
            "max_tokens": row["max_tokens"],
            "priority": row["priority"],
            "arrival_step": row["arrival_step"],
            "finish_step": fold.finished["step"] if fold.finished else None,
            "finish_reason": fold.finished["reason"] if fold.finished else None,
        },
        "modes": {
            "async_scheduling": bool(config.get("async_scheduling")),
            "num_speculative_tokens": int(config.get("num_speculative_tokens") or 0),
            "batching": config.get("batching", "continuous"),
            "block_size": config.get("block_size"),
        },
        "latency": latency(life["marks"], life["outputs"]),
        "scheduled": life["scheduled"],
        "waits": life["waits"],
        "preemptions": life["preemptions"],
        "outputs": life["outputs"],
        "placeholders": life["placeholders"],
        "blocks": life["blocks"],
        "marks": life["marks"],
        "text": life["text"],
        "frames": {"scanned": scanned, "parsed": fold.parsed},
        "elapsed_ms": round((time.perf_counter() - t0) * 1000, 1),
    }
    with _LOCK:
        _CACHE[key] = out
        while len(_CACHE) > CACHE_ENTRIES:
            _CACHE.popitem(last=False)
    return out
