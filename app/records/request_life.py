"""A request's whole life, from the recorded frames: every step it was scheduled (chunk,
phase, prefix hit, drafts and how many were accepted), each wait with its reason worded
with the step's numbers (engine.waiting), preemptions (tokens lost, the allocation that
took the blocks when it can be told, the recompute), the KV blocks it held
(app.records.life_blocks), its outputs (which step's batch each came from under async
scheduling), latency and its text or token ids.

Works the same for a live session (it is recorded as it runs), a replay and after a
restart. Only the steps between its arrival and its finish are read (iterations' primary
key is (session, step)), and only the frames that mention the request are parsed.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from itertools import pairwise
from typing import Any

from sqlalchemy.orm import Session

from app.db import queries, request_frames
from app.errors import NotFound
from app.records import frame_slices
from app.records.life_blocks import BlockTrack
from engine.waiting import waiting_text

MAX_WAIT_ROWS = 400
"""Wait intervals listed with their own numbers; past this, same-reason runs merge."""
TEXT_KEYS = ("prompt_text", "prompt_token_ids", "output_text", "output_token_ids")
CACHE_ENTRIES = 32
"""Lives kept (a recorded step range never changes; a request still live is keyed by the
session's last seq too): clicking back and forth reads the frames once."""
_CACHE: OrderedDict[tuple[str, str, int, int], dict[str, Any]] = OrderedDict()
_LOCK = threading.Lock()


class LifeFold:
    """Folds the frames of one request, step by step, up to `upto` (inclusive)."""

    def __init__(self, req: str) -> None:
        self.req = req
        self.scheduled: list[dict[str, Any]] = []
        self.waits: list[dict[str, Any]] = []
        self.preemptions: list[dict[str, Any]] = []
        self.outputs: list[dict[str, Any]] = []
        self.placeholders: list[list[int]] = []
        self.marks: list[dict[str, Any]] = []
        self.text: dict[str, Any] = {}
        self.blocks = BlockTrack(req)
        self.finished: dict[str, Any] | None = None
        self.running = False
        self.parsed = 0
        self._placeholders = 0

    # ---------------------------------------------------------------- frames
    def iteration(
        self, d: dict[str, Any], scheduled: Callable[[], list[dict[str, Any]]] | None = None
    ) -> None:
        """Fold step `d`. `d["scheduled"]` may hold only our row; then `scheduled()`
        gives the whole list, when the block attribution needs it."""
        req, step = self.req, d["step"]
        self.parsed += 1
        t_end = d["t_start"] + d["duration"]
        item = next((i for i in d["scheduled"] if i["req"] == req), None)
        admitted = False
        if item is not None:
            admitted = not self.running
            self.running = True
            accepted = d.get("accepted", {}).get(req)
            self.scheduled.append(
                {
                    "step": step,
                    "n": item["n"],
                    "start": item["start"],
                    "phase": item["phase"],
                    "prefix_hit": item.get("prefix_hit", 0) if admitted else 0,
                    "sample": bool(item.get("sample", True)),
                    "spec": item.get("spec", 0),
                    "accepted": accepted,
                    "pad": item.get("pad", 0),
                }
            )
        mine = set(self.blocks.held)
        self.blocks.step(
            step,
            d["blocks"],
            scheduled or (lambda: list(d["scheduled"])),
            admitted and bool(item and item.get("prefix_hit")),
        )
        reason = d["waiting_reasons"].get(req)
        if reason is not None:
            self._wait(step, reason, d.get("waiting_detail"))
        for p in d["preempted"]:
            if p["req"] == req:
                self._preempted(step, p, d["blocks"], mine)
        if req in d["sampled"]:
            self.outputs.append(
                {
                    "step": step,
                    "batch": d.get("updated_step", step),
                    "n": d.get("appended", {}).get(req, 1),
                    "t": round(t_end, 6),
                }
            )
        n = d.get("placeholders", {}).get(req, 0)
        if n != self._placeholders:
            self.placeholders.append([step, n])
            self._placeholders = n
        for f in d["finished"]:
            if f["req"] == req:
                self.finished = {"step": step, "reason": f["reason"], "t": round(t_end, 6)}
                self.running = False
                self.blocks.release_all(step)

    def mark(self, d: dict[str, Any]) -> None:
        detail = d.get("detail") or {}
        for key in TEXT_KEYS:
            if key in detail:
                self.text[key] = detail[key]
        light = {k: v for k, v in detail.items() if k not in TEXT_KEYS}
        self.marks.append({"kind": d["kind"], "step": d["step"], "t": d["t"], "detail": light})

    def _wait(self, step: int, reason: str, detail: dict[str, Any] | None) -> None:
        text = waiting_text(self.req, reason, detail)
        last = self.waits[-1] if self.waits else None
        if last and last["to"] == step - 1 and last["reason"] == reason and last["text"] == text:
            last["to"] = step
            return
        self.waits.append(
            {"from": step, "to": step, "reason": reason, "text": text, "detail": detail or {}}
        )

    def _preempted(
        self, step: int, p: dict[str, Any], changes: list[list[Any]], mine: set[int]
    ) -> None:
        """`mine`: the blocks it held before this step. The allocation that forced the
        preemption is told by who got those blocks in the same step."""
        takers = sorted(
            {o for b, s, o, _ in changes if b in mine and s in ("used", "shared") and o != self.req}
        )
        self.preemptions.append(
            {
                "step": step,
                "reason": p.get("reason"),
                "tokens_lost": p["tokens_lost"],
                "blocks_freed": len(mine),
                "blocks_taken_by": takers,
            }
        )
        self.running = False
        self.blocks.release_all(step)

    # ---------------------------------------------------------------- result
    def _recompute(self) -> None:
        """For each preemption: when it resumed, the prefix hit then, and the tokens and
        steps spent computing the lost positions again."""
        for p in self.preemptions:
            after = [s for s in self.scheduled if s["step"] > p["step"]]
            if not after:
                p.update(resumed_step=None, recomputed_tokens=0, recompute_steps=None)
                continue
            first = after[0]
            lost, done, last = p["tokens_lost"], first["start"], first["step"]
            for s in after:
                if s["start"] >= lost:
                    break
                done, last = s["start"] + s["n"], s["step"]
            recomputed = max(0, min(done, lost) - first["start"])
            p.update(
                resumed_step=first["step"],
                resume_prefix_hit=first["prefix_hit"],
                recomputed_tokens=recomputed,
                recompute_steps=[first["step"], last],
            )

    def _merged_waits(self) -> list[dict[str, Any]]:
        if len(self.waits) <= MAX_WAIT_ROWS:
            return self.waits
        out: list[dict[str, Any]] = []
        for w in self.waits:
            last = out[-1] if out else None
            if last and last["reason"] == w["reason"] and last["to"] == w["from"] - 1:
                last["to"] = w["to"]
                last["last_text"] = w["text"]
                last["variants"] = last.get("variants", 1) + 1
            else:
                out.append(dict(w))
        return out

    def result(self) -> dict[str, Any]:
        self._recompute()
        return {
            "scheduled": self.scheduled,
            "waits": self._merged_waits(),
            "preemptions": self.preemptions,
            "outputs": self.outputs,
            "placeholders": self.placeholders,
            "blocks": self.blocks.result(),
            "marks": self.marks,
            "text": self.text,
        }


def _latency(marks: list[dict[str, Any]], outputs: list[dict[str, Any]]) -> dict[str, Any]:
    t = {m["kind"]: m["t"] for m in reversed(marks)}  # the first of each kind
    arrived = t.get("arrived")

    def since(kind: str) -> float | None:
        v = t.get(kind)
        return None if v is None or arrived is None else round(v - arrived, 6)

    gaps = [round(b["t"] - a["t"], 6) for a, b in pairwise(outputs)]
    end = next((m["t"] for m in marks if m["kind"] in ("finished", "aborted")), None)
    return {
        "ttft": since("first_token"),
        "queue": since("scheduled"),
        "e2e": None if end is None or arrived is None else round(end - arrived, 6),
        "itl_mean": round(sum(gaps) / len(gaps), 6) if gaps else None,
        "itl_max": max(gaps) if gaps else None,
        "itl": gaps[-2000:],
    }


def _status(fold: LifeFold, marks: list[dict[str, Any]]) -> str:
    kinds = [m["kind"] for m in marks]
    if "rejected" in kinds:
        return "REJECTED"
    if fold.finished or "finished" in kinds or "aborted" in kinds:
        return "FINISHED"
    if fold.running:
        return "RUNNING"
    return "PREEMPTED" if fold.preemptions else "WAITING"


def request_life(
    db: Session, session_id: str, req_id: str, upto_step: int | None = None
) -> dict[str, Any]:
    """The life of `req_id` in recording `session_id` up to `upto_step` (default: all).
    Raises NotFound for an unknown session or request."""
    t0 = time.perf_counter()
    meta = queries.get_session(db, session_id)
    row = request_frames.request_record(db, session_id, req_id)
    if row is None or row["arrival_step"] is None:
        raise NotFound(f"no request {req_id!r} recorded in session {session_id!r}")
    first = row["arrival_step"]
    last = meta["steps"] - 1 if row["finish_step"] is None else row["finish_step"]
    if upto_step is not None:
        last = min(last, upto_step)
    if last < first:
        raise NotFound(f"request {req_id!r} arrives after step {upto_step}")
    key = (session_id, req_id, last, meta["last_seq"] if row["finish_step"] is None else 0)
    with _LOCK:
        cached = _CACHE.get(key)
        if cached is not None:
            _CACHE.move_to_end(key)
            return {**cached, "cached": True}
    needle = json.dumps(req_id)
    fold = LifeFold(req_id)
    scanned = 0
    for text in request_frames.iteration_texts(db, session_id, first, last):
        scanned += 1
        if needle not in text:
            continue
        d = frame_slices.request_slice(text, req_id, needle)
        if d is None:
            fold.iteration(json.loads(text)["data"])
        else:
            fold.iteration(d, partial(frame_slices.all_scheduled, text, d["scheduled_at"]))
    for text in request_frames.request_mark_texts(db, session_id, first, last):
        if needle in text:
            d = json.loads(text)["data"]
            if d["req"] == req_id:
                fold.mark(d)
    life = fold.result()
    config = meta["config"] or {}
    out = {
        "session": session_id,
        "req": req_id,
        "upto_step": last,
        "status": _status(fold, life["marks"]),
        "request": {
            "num_prompt_tokens": row["num_prompt_tokens"],
            "max_tokens": row["max_tokens"],
            "priority": row["priority"],
            "arrival_step": first,
            "finish_step": fold.finished["step"] if fold.finished else None,
            "finish_reason": fold.finished["reason"] if fold.finished else None,
        },
        "modes": {
            "async_scheduling": bool(config.get("async_scheduling")),
            "num_speculative_tokens": int(config.get("num_speculative_tokens") or 0),
            "batching": config.get("batching", "continuous"),
            "block_size": config.get("block_size"),
        },
        "latency": _latency(life["marks"], life["outputs"]),
        **life,
        "frames": {"scanned": scanned, "parsed": fold.parsed},
        "elapsed_ms": round((time.perf_counter() - t0) * 1000, 1),
    }
    with _LOCK:
        _CACHE[key] = out
        while len(_CACHE) > CACHE_ENTRIES:
            _CACHE.popitem(last=False)
    return out
