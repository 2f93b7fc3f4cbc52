"""LifeFold: one request's frames folded step by step into its life: the steps it was
scheduled (chunk, phase, prefix hit, drafts and how many were accepted), the reason it
waited at each step, preemptions (tokens lost, who took its blocks, the recompute), its
outputs (which step's batch each came from under async scheduling) and placeholders, the
KV blocks it held (app.records.life_blocks), its marks and text; plus latency and status.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from typing import Any

from app.records.frame_slices import StepSlice
from app.records.life_blocks import BlockTrack
from app.records.life_types import (
    Finish,
    Latency,
    LifeParts,
    Mark,
    Output,
    Preemption,
    ScheduledStep,
    WaitSpan,
)
from engine.waiting import waiting_text
from protocol.codes import BlockState, RequestMark, RequestStatus
from protocol.wire import BlockChange, PreemptedRow, RequestMarkData, ScheduledRow, WaitingDetail

HELD = (BlockState.USED.value, BlockState.SHARED.value)
MAX_WAIT_ROWS = 400
"""Wait intervals listed with their own numbers; past this, same-reason runs merge."""
TEXT_KEYS = ("prompt_text", "prompt_token_ids", "output_text", "output_token_ids")
HIDDEN_KEYS = (*TEXT_KEYS, "prompt_block_hashes")
ENDS = (RequestMark.FINISHED, RequestMark.ABORTED, RequestMark.REJECTED)
"""Kept out of a mark's detail (the text is shown apart; block hashes are for exports)."""


class LifeFold:
    """Folds the frames of one request, step by step, up to `upto` (inclusive)."""

    def __init__(self, req: str) -> None:
        self.req = req
        self.scheduled: list[ScheduledStep] = []
        self.wait_steps: dict[int, tuple[str, WaitingDetail]] = {}
        """step -> (reason, the step's waiting detail), from frames or step_waits."""
        self.steps_read: set[int] = set()
        self.preemptions: list[Preemption] = []
        self.outputs: list[Output] = []
        self.placeholders: list[list[int]] = []
        self.marks: list[Mark] = []
        self.text: dict[str, Any] = {}
        self.blocks = BlockTrack(req)
        self.finished: Finish | None = None
        self.running = False
        self.parsed = 0
        self._placeholders = 0
        self._arrived_step: int | None = None
        self._ends: list[tuple[int, int | None]] = []
        """(step, seq) of the marks that ended it (finished, aborted, rejected)."""

    # ---------------------------------------------------------------- frames
    def iteration(
        self,
        d: StepSlice,
        scheduled: Callable[[], list[ScheduledRow]] | None = None,
        seq: int | None = None,
    ) -> None:
        """Fold step `d` (frame `seq`). `d["scheduled"]` may hold only our row; then
        `scheduled()` gives the whole list, when the block attribution needs it."""
        req, step = self.req, d["step"]
        was_running = self.running
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
        self.steps_read.add(step)
        reason = d["waiting_reasons"].get(req)
        default = d.get("waiting_default")
        if reason is None and default is not None and item is None:
            preempted_now = any(p["req"] == req for p in d["preempted"])
            if preempted_now or (not was_running and self._waits_at(step, d, seq)):
                reason = default
        if reason is not None:
            self.wait_steps[step] = (reason, d.get("waiting_detail") or {})
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

    def _waits_at(self, step: int, d: StepSlice, seq: int | None) -> bool:
        """Whether the request, not scheduled at step `d` (frame `seq`) nor running
        before it, is in the waiting queue after its schedule (its marks are folded
        first): arrived by then and not ended. An abort's mark names the step about to
        run and precedes its frame; a stop's names the last step that ran and follows
        its frame (protocol.lifecycle.stop_marks): the request waited there."""
        if self.finished is not None or any(f["req"] == self.req for f in d["finished"]):
            return False
        if self._arrived_step is not None and self._arrived_step > step:
            return False
        for end_step, end_seq in self._ends:
            if end_step < step:
                return False
            if end_step == step and (end_seq is None or seq is None or end_seq < seq):
                return False
        return True

    def mark(self, d: RequestMarkData, seq: int | None = None) -> None:
        """Fold one of the request's marks (frame `seq`), before its frames."""
        if d["kind"] == RequestMark.ARRIVED and self._arrived_step is None:
            self._arrived_step = d["step"]
        elif d["kind"] in ENDS:
            self._ends.append((d["step"], seq))
        detail: dict[str, Any] = dict(d.get("detail") or {})
        for key in TEXT_KEYS:
            if key in detail:
                self.text[key] = detail[key]
        light = {k: v for k, v in detail.items() if k not in HIDDEN_KEYS}
        self.marks.append({"kind": d["kind"], "step": d["step"], "t": d["t"], "detail": light})

    def _waits(self) -> list[WaitSpan]:
        """Consecutive steps with the same reason and the same words, as spans."""
        out: list[WaitSpan] = []
        for step in sorted(self.wait_steps):
            reason, detail = self.wait_steps[step]
            text = waiting_text(self.req, reason, detail)
            last = out[-1] if out else None
            same = last and last["reason"] == reason and last["text"] == text
            if last and same and last["to"] == step - 1:
                last["to"] = step
            else:
                out.append(
                    {
                        "from": step,
                        "to": step,
                        "reason": reason,
                        "text": text,
                        "detail": detail,
                        "last_text": None,
                        "variants": None,
                    }
                )
        return out

    def _preempted(
        self, step: int, p: PreemptedRow, changes: list[BlockChange], mine: set[int]
    ) -> None:
        """`mine`: the blocks it held before this step. The allocation that forced the
        preemption is told by who got those blocks in the same step."""
        takers = sorted({o for b, s, o, _ in changes if b in mine and s in HELD and o != self.req})
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
                p["resumed_step"], p["recomputed_tokens"], p["recompute_steps"] = None, 0, None
                continue
            first = after[0]
            lost, done, last = p["tokens_lost"], first["start"], first["step"]
            for s in after:
                if s["start"] >= lost:
                    break
                done, last = s["start"] + s["n"], s["step"]
            recomputed = max(0, min(done, lost) - first["start"])
            p["resumed_step"], p["resume_prefix_hit"] = first["step"], first["prefix_hit"]
            p["recomputed_tokens"], p["recompute_steps"] = recomputed, [first["step"], last]

    def _merged_waits(self) -> list[WaitSpan]:
        waits = self._waits()
        if len(waits) <= MAX_WAIT_ROWS:
            return waits
        out: list[WaitSpan] = []
        for w in waits:
            last = out[-1] if out else None
            if last and last["reason"] == w["reason"] and last["to"] == w["from"] - 1:
                last["to"] = w["to"]
                last["last_text"] = w["text"]
                last["variants"] = (last["variants"] or 1) + 1
            else:
                out.append(w.copy())
        return out

    def result(self) -> LifeParts:
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


def latency(marks: list[Mark], outputs: list[Output]) -> Latency:
    t = {m["kind"]: m["t"] for m in reversed(marks)}  # the first of each kind
    arrived = t.get(RequestMark.ARRIVED)

    def since(kind: str) -> float | None:
        v = t.get(kind)
        return None if v is None or arrived is None else round(v - arrived, 6)

    gaps = [round(b["t"] - a["t"], 6) for a, b in pairwise(outputs)]
    ends = (RequestMark.FINISHED, RequestMark.ABORTED)
    end = next((m["t"] for m in marks if m["kind"] in ends), None)
    return {
        "ttft": since(RequestMark.FIRST_TOKEN),
        "queue": since(RequestMark.SCHEDULED),
        "e2e": None if end is None or arrived is None else round(end - arrived, 6),
        "itl_mean": round(sum(gaps) / len(gaps), 6) if gaps else None,
        "itl_max": max(gaps) if gaps else None,
        "itl": gaps[-2000:],
    }


def status(fold: LifeFold, marks: list[Mark]) -> str:
    kinds = [m["kind"] for m in marks]
    if RequestMark.REJECTED in kinds:
        return RequestStatus.REJECTED
    if fold.finished or RequestMark.FINISHED in kinds or RequestMark.ABORTED in kinds:
        return RequestStatus.FINISHED
    if fold.running:
        return RequestStatus.RUNNING
    return RequestStatus.PREEMPTED if fold.preemptions else RequestStatus.WAITING
