"""The Gantt segments of a page of a recording's request table at a step (the replay
Gantt draws the table's rows, so it reaches every request of a recording of any size).

A row's segments are [kind, start_step, end_step, tokens] (protocol.views.Segment, kinds
protocol.codes.SegmentKind), as a fold keeping every row has them at the step:

- requests live at the step: the fold's at the step (app.request_table.live_rows_at),
  open ones closed at the step;
- requests waiting at the step, never scheduled by then (left to the requests table):
  one waiting segment from their arrival to the step;
- requests done by the step: stored on their requests row when they ended (0009, the
  writer's fold); on rows without them (recorded before 0009, imported, or written by a
  writer that could not fold the session) rebuilt here by folding the recording from
  just before their arrival to their end, at most REBUILD_FRAMES frames a page (beyond
  that they get None: the browser then draws what its own fold holds of them).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app import fast_json
from app.db import queries
from app.db.models import RequestRecord
from app.db.writes import ENDED_MARKS
from app.frames.fold import SessionState
from protocol.codes import FrameType, SegmentKind
from protocol.views import Segment

R = RequestRecord
WAITING = SegmentKind.WAITING.value
REBUILD_FRAMES = 20_000
"""Frames a page's rebuild folds at most (old recordings only)."""
SEEK_COST = 1000
"""What a group's seek to its start counts against REBUILD_FRAMES."""


def closed(segments: list[Segment], step: int) -> list[Segment]:
    """A copy of `segments`, open ones closed at `step` (as a snapshot at it has them)."""
    out = [list(s) for s in segments]
    for s in out:
        if s[2] is None:
            s[2] = max(step, s[1])
    return out


def add_segments(db: Session, session_id: str, step: int, page: list[dict[str, Any]]) -> None:
    """Give each row of `page` (app.db.request_page's, at `step`) its `segments`."""
    done = [
        r["req"]
        for r in page
        if "segments" not in r and r.get("finish_step") is not None and r["finish_step"] <= step
    ]
    stored: dict[str, Any] = {}
    missing: list[tuple[str, int | None, int]] = []
    for i in range(0, len(done), 500):
        rows = db.execute(
            select(R.req_id, R.segments, R.arrival_seq, R.finish_step).where(
                R.session_id == session_id, R.req_id.in_(done[i : i + 500])
            )
        )
        for req, segs, seq, fin in rows:
            if segs is not None:
                stored[req] = segs
            elif fin is not None:
                missing.append((req, seq, fin))
    if missing:
        stored.update(rebuild(db, session_id, missing))
    for r in page:
        if "segments" in r:
            continue
        if r["req"] in stored:
            r["segments"] = stored[r["req"]]
        elif r.get("finish_step") is None and r.get("arrived_step") is not None:
            # Waiting since its arrival, never scheduled by the step.
            r["segments"] = [[WAITING, r["arrived_step"], max(step, r["arrived_step"]), 0]]
        else:
            r["segments"] = None


def rebuild(
    db: Session, session_id: str, reqs: list[tuple[str, int | None, int]]
) -> dict[str, list[Segment]]:
    """The final segments of done requests (req, arrival seq, finish step) without stored
    ones, from the recording's frames: spans of nearby requests are folded together, at
    most REBUILD_FRAMES frames in all."""
    out: dict[str, list[Segment]] = {}
    spans = sorted(
        (max((seq or 1) - 1, 0), queries.last_seq_at_step(db, session_id, fin), req)
        for req, seq, fin in reqs
    )
    groups: list[tuple[int, int, set[str]]] = []
    for lo, hi, req in spans:
        if groups and lo <= groups[-1][1] + 1000:
            a, b, ids = groups[-1]
            groups[-1] = (a, max(b, hi), ids | {req})
        else:
            groups.append((lo, hi, {req}))
    budget = REBUILD_FRAMES
    for lo, hi, ids in groups:
        cost = hi - lo + SEEK_COST
        if cost > budget:
            continue
        budget -= cost
        state = queries.state_at_seq(db, session_id, lo) if lo > 0 else SessionState(session_id)
        for seq, text in queries.iter_frames(db, session_id, state.seq, hi):
            frame = fast_json.loads(text)
            data = frame["data"]
            state.apply(frame["type"], seq, data)
            if (
                frame["type"] == FrameType.REQUEST
                and data.get("kind") in ENDED_MARKS
                and data["req"] in ids
            ):
                row = state.requests.get(data["req"])
                if row is not None:
                    out[data["req"]] = [list(s) for s in row["segments"]]
    return out
