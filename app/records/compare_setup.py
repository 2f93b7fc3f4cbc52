"""What differs between two recordings' setups, beside what they decided: source, runner,
model, device, vLLM release, clock (where step times came from), workload and knobs;
and, in words, whether comparing their numbers is like for like (only knobs differ) or
mixes a knob's effect with a runner, a clock, a release or a workload.

A re-run on the `recorded` runner (app.records.rerun) follows its source's steps: its
runner, model and device are the source's, and its clock is the source's recorded step
times while its plan matches (then a cost model fitted on them). So it is like for like
with its source, and with any other `recorded` re-run of the same source.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import RequestRecord, SessionRecord
from app.errors import NotFound
from app.records.compare_types import SetupData, SetupRow

RECORDED = "recorded"
NOT_RECORDED = "not recorded"


def _meta(rec: SessionRecord) -> dict[str, Any]:
    return dict(rec.meta or {})


def _runner(rec: SessionRecord) -> tuple[str, str]:
    """(what to compare, what to show) of a session's runner."""
    meta = _meta(rec)
    if rec.runner == RECORDED:
        followed = str(meta.get("source_runner") or "?")
        return followed, f"{followed} (re-run on its recorded steps, simulated)"
    return rec.runner or NOT_RECORDED, rec.runner or NOT_RECORDED


def _clock(rec: SessionRecord) -> tuple[str, str]:
    """(what to compare, what to show) of where a session's step times came from."""
    meta = _meta(rec)
    if rec.runner == RECORDED:
        root = str(meta.get("rerun_of") or "")
        return f"timeline:{root}", f"{root}'s recorded step times, then a cost model fitted on them"
    if rec.source == "rerun" and rec.runner == "torch":
        return "wall", "wall clock (the model ran again: step times measured anew)"
    if rec.simulated or rec.runner == "sim":
        preset = meta.get("cost_model")
        if preset:
            label = meta.get("cost_model_label") or preset
            return f"model:{preset}", f"the SimRunner's cost model: {label} [{preset}]"
        return "model", "the SimRunner's cost model"
    return "wall", "wall clock (measured)"


def _clock_key(rec: SessionRecord, other: SessionRecord) -> str:
    """A session's clock as compared with `other`'s: a recording's own clock is the
    timeline that a `recorded` re-run of it follows."""
    key, _ = _clock(rec)
    if other.runner == RECORDED and _meta(other).get("rerun_of") == rec.id:
        return f"timeline:{rec.id}"
    return key


def _release(rec: SessionRecord) -> str:
    config = dict(rec.config or {})
    return str(config.get("vllm_version") or _meta(rec).get("vllm_version") or NOT_RECORDED)


def _workload(db: Session, session_id: str) -> tuple[tuple[Any, ...], str]:
    rows = db.execute(
        select(
            RequestRecord.req_id,
            RequestRecord.num_prompt_tokens,
            RequestRecord.max_tokens,
            RequestRecord.priority,
        )
        .where(RequestRecord.session_id == session_id)
        .order_by(RequestRecord.req_id)
    ).all()
    key = tuple(tuple(r) for r in rows)
    prompt = sum(int(r[1] or 0) for r in rows)
    return key, f"{len(rows):,} requests, {prompt:,} prompt tokens"


def _knobs(a: SessionRecord, b: SessionRecord) -> list[str]:
    ka, kb = dict(a.config or {}), dict(b.config or {})
    return sorted(k for k in set(ka) | set(kb) if k != "vllm_version" and ka.get(k) != kb.get(k))


def _row(key: str, label: str, a: str, b: str, differs: bool | None = None) -> SetupRow:
    return {
        "key": key,
        "label": label,
        "a": a,
        "b": b,
        "differs": a != b if differs is None else differs,
    }


def setup_difference(db: Session, a: str, b: str) -> SetupData:
    """Every difference between the setups of recordings `a` and `b`. Raises NotFound."""
    ra, rb = db.get(SessionRecord, a), db.get(SessionRecord, b)
    for sid, rec in ((a, ra), (b, rb)):
        if rec is None:
            raise NotFound(f"no recorded session {sid!r}")
    assert ra is not None and rb is not None
    (run_a, show_a), (run_b, show_b) = _runner(ra), _runner(rb)
    (wl_a, text_a), (wl_b, text_b) = _workload(db, a), _workload(db, b)
    knobs = _knobs(ra, rb)
    ka, kb = dict(ra.config or {}), dict(rb.config or {})
    rows = [
        _row("source", "source", ra.source, rb.source, False),
        _row("runner", "runner", show_a, show_b, run_a != run_b),
        _row("model", "model", ra.model or NOT_RECORDED, rb.model or NOT_RECORDED),
        _row("device", "device", ra.device or NOT_RECORDED, rb.device or NOT_RECORDED),
        _row("release", "vLLM release", _release(ra), _release(rb)),
        _row(
            "clock",
            "clock (step times)",
            _clock(ra)[1],
            _clock(rb)[1],
            _clock_key(ra, rb) != _clock_key(rb, ra),
        ),
        _row("workload", "workload (arrivals)", text_a, text_b, wl_a != wl_b),
        _row(
            "knobs",
            "knobs",
            ", ".join(f"{k}={ka.get(k)}" for k in knobs) or "same",
            ", ".join(f"{k}={kb.get(k)}" for k in knobs) or "same",
            bool(knobs),
        ),
    ]
    besides = [r["label"] for r in rows if r["differs"] and r["key"] != "knobs"]
    if besides:
        what = ", ".join(besides)
        verdict = (
            f"Not like for like: besides the knobs, the {what} differ"
            f"{'s' if len(besides) == 1 else ''}; the differences below mix "
            "their effect with the knobs'."
        )
    elif knobs:
        verdict = f"Like for like: only the knobs differ ({', '.join(knobs)})."
    else:
        verdict = "Like for like: the same setup and knobs."
    return {"rows": rows, "like_for_like": not besides, "verdict": verdict, "notes": _notes(ra, rb)}


def _notes(ra: SessionRecord, rb: SessionRecord) -> list[str]:
    notes: list[str] = []
    for side, rec in (("A", ra), ("B", rb)):
        meta = _meta(rec)
        dropped = meta.get("not_modelled")
        if isinstance(dropped, list) and dropped:
            notes.append(
                f"{side} dropped knobs of its vLLM node that our engine does not model: "
                f"{', '.join(map(str, dropped))}; where they mattered it decides otherwise."
            )
        if rec.runner == RECORDED:
            notes.append(
                f"{side} re-ran {meta.get('rerun_of')} on its recorded steps: step times are "
                "the recording's while the plans match, then modelled (a cost model fitted "
                "on its steps), so times after the first difference are estimates."
            )
        elif rec.source == "rerun" and rec.runner == "torch":
            notes.append(
                f"{side} re-ran the model for real: its step times are the wall clock's "
                "anew, so it differs from its recording even with no knob changed."
            )
        elif rec.source == "rerun" and rec.runner == "sim":
            notes.append(
                f"{side} re-ran on the SimRunner's cost model: arrivals kept their recorded "
                "times on another clock, so it differs from its recording even with no "
                "knob changed."
            )
    return notes
