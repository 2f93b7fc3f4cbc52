"""Live rows: the rows of the requests not done at the end of a step, as the fold has
them, stored so a recording's request table at a step (app.db.live_view) folds from a
few hundred rows, not from a whole checkpoint (which holds the waiting queue, 50,000
rows under an overload, and everything else of the session).

The writer takes them at step ends (the first frame of a later step is about to be
folded). Two kinds:
- every live row (`pending` null), on a clock like the checkpoints' (a seek folds at most
  a few hundred frames after one);
- under a long waiting queue (PENDING_APART or more requests never scheduled yet), on
  the same clock, without those requests: their rows are all alike (the arrival's
  numbers, nothing run yet) and are read from the requests table; `pending` is their
  number, `pending_from` the arrival step of the oldest, and `reasons` their waiting
  reasons (the most common one and the exceptions). Taken only when the marks agree with
  the fold (the requests table tells exactly those requests apart at that step). A seek
  to a later step reads those of them whose life changed by then from the requests table
  and folds on (app.db.live_view). (Taken at every step end, these were 60% of a
  recording's bytes under an overload: 23 kB a step for 256 running rows.)

The fold's index (app.frames.row_index) gives the rows not left out without a walk of
the queue; the taker checks the marks against it only for the requests each frame
touches. It also tells where a checkpoint may leave those requests to the requests
table the same way (apart_checkpoint; app.db.recording_fold).
"""

from __future__ import annotations

import base64
import zlib
from collections import Counter
from collections.abc import Iterable
from itertools import chain
from operator import itemgetter
from typing import Any, Protocol, TypedDict

from app import fast_json
from app.db.checkpoint_codec import LEVEL, CheckpointClock
from app.frames.checkpoint import LeftOut
from app.frames.row_index import RowIndex
from app.frames.step_reasons import StepReasons
from protocol.codes import FrameType, RequestMark, RequestStatus, SessionEvent
from protocol.views import RequestRow
from protocol.wire import WaitingDetail

PENDING_APART = 256
"""Never-scheduled requests from which they are left out (and rows are taken every step)."""
MAX_EXCEPTIONS = 64
"""Pending requests whose reason is not the most common one, at most (else none taken)."""
CLOCK_MIN, CLOCK_MAX = 1, 250
PREFIX = "z1:"
WAITING = RequestStatus.WAITING.value
ITERATION, REQUEST = FrameType.ITERATION.value, FrameType.REQUEST.value
SESSION, CLOSED = FrameType.SESSION.value, SessionEvent.CLOSED.value
ARRIVED, SCHEDULED = RequestMark.ARRIVED.value, RequestMark.SCHEDULED.value
FIRST_TOKEN = RequestMark.FIRST_TOKEN.value
ENDS = (RequestMark.FINISHED.value, RequestMark.ABORTED.value, RequestMark.REJECTED.value)
_WAITING_REASON = itemgetter("waiting_reason")


class Folded(Protocol):
    """What the taker reads of a session's fold (app.frames.fold.SessionState)."""

    @property
    def seq(self) -> int: ...
    @property
    def step(self) -> int: ...
    @property
    def requests(self) -> dict[str, RequestRow]: ...
    @property
    def index(self) -> RowIndex: ...
    @property
    def num_requests(self) -> int: ...
    @property
    def in_flight(self) -> set[str]: ...
    @property
    def waiting_detail(self) -> WaitingDetail: ...
    @property
    def reasons(self) -> StepReasons: ...
    def settle(self, rows: Iterable[RequestRow] | None = None) -> None: ...


class Reasons(TypedDict):
    default: str | None
    exceptions: dict[str, str | None]


class LiveRows(TypedDict):
    """What a live_rows record holds (JSON)."""

    seq: int
    step: int
    rows: dict[str, Any]
    """req -> the fold's row (protocol.views.RequestRow, with segments)."""
    in_flight: list[str]
    waiting_detail: WaitingDetail
    pending: int | None
    """Never-scheduled waiting requests left out (None: none left out)."""
    pending_from: int | None
    """The arrival step of the oldest of them (absent in records made before it)."""
    reasons: Reasons | None


def encode_live_rows(data: LiveRows) -> str:
    raw = fast_json.dumps(data)
    return PREFIX + base64.b64encode(zlib.compress(raw, LEVEL)).decode("ascii")


def decode_live_rows(text: str) -> LiveRows:
    data: LiveRows = fast_json.loads(zlib.decompress(base64.b64decode(text[len(PREFIX) :])))
    return data


def never_scheduled(row: Any) -> bool:
    """Waiting, never scheduled, not ended: a row the live rows leave out."""
    return bool(
        row["status"] == WAITING
        and row["first_scheduled_step"] is None
        and row["finish_step"] is None
    )


class LiveRowsTaker:
    """One session's live rows, fed every frame the writer folds (from the session's
    first frame: the marks must all be seen)."""

    def __init__(self) -> None:
        self.pending: dict[str, int] = {}
        """Arrived, not scheduled nor ended yet, by the request marks: req -> arrival
        step, oldest first."""
        self.clock = CheckpointClock(CLOCK_MIN, CLOCK_MAX)
        self.seen_step = -1
        """The step of the latest frame seen (iteration or request)."""
        self.apart: set[str] = set()
        """Requests the marks and the fold tell apart (pending by one, not the other), of
        those a frame touched: checked as frames come, not by a walk of the queue."""
        self.arrival_seqs: dict[str, int] = {}
        """Each request's arrival seq (of the mark that made its row)."""
        self.made_by_marks = 0
        """Rows the fold made for a request mark. All of them (the fold's count): the
        fold's rows are in the order of those marks, as the requests table's."""
        self.touched = False
        """A never-scheduled row was changed as only a scheduled one is (a token, a
        placeholder), or a row arrived twice: rows rebuilt from the requests table would
        differ from the fold's (checkpoints are then stored whole)."""

    def before(self, state: Folded, frame_type: str, data: Any) -> LiveRows | None:
        """Called before `state` folds a frame: the live rows at the end of its step if
        the frame starts a later step and some are due, or if it closes the session (its
        last step then pages like any other, however long the queue it ended with)."""
        if frame_type == SESSION and data.get("event") == CLOSED:
            if state.step < 0 or state.step != self.seen_step:
                return None
            apart = self._apart(state) if len(self.pending) >= PENDING_APART else None
            return apart or self._whole(state)
        if not self.starts_step(state, frame_type, data):
            return None  # not the first frame of a later step, or a step without a frame
        if not self.clock.due():
            return None
        return self._apart(state) if len(self.pending) >= PENDING_APART else self._whole(state)

    def starts_step(self, state: Folded, frame_type: str, data: Any) -> bool:
        """Whether the frame is the first of a later step than the fold's (the fold is at
        the end of its step: every mark of it seen)."""
        step = data.get("step") if frame_type in (ITERATION, REQUEST) else None
        return (
            isinstance(step, int)
            and step > self.seen_step
            and state.step == self.seen_step
            and state.step >= 0
        )

    def after(self, state: Folded, frame_type: str, data: Any, text: str) -> None:
        """Called after the fold took the frame (`text`: its stored text)."""
        self.clock.add(frame_type, text)
        step = data.get("step") if frame_type in (ITERATION, REQUEST) else None
        if isinstance(step, int) and step > self.seen_step:
            self.seen_step = step
        unscheduled = state.index.unscheduled
        if frame_type == ITERATION:
            self._touched(data, unscheduled)
            for req in data["arrived"]:
                self._check(req, unscheduled)
            for item in data["scheduled"]:
                self._check(item["req"], unscheduled)
            for p in data["preempted"]:
                self._check(p["req"], unscheduled)
            for f in data["finished"]:
                self._check(f["req"], unscheduled)
            return
        if frame_type != REQUEST:
            return
        kind, req = data.get("kind"), data.get("req")
        if kind == ARRIVED:
            self.pending[req] = data.get("step", 0)
        elif kind == SCHEDULED or kind in ENDS:
            self.pending.pop(req, None)
        elif kind == FIRST_TOKEN and req in unscheduled:
            self.touched = True
        self._check(req, unscheduled)

    def made(self, state: Folded, frame_type: str, seq: int, data: Any) -> None:
        """Called before the fold takes the frame: counts the rows a mark makes (the
        requests table's arrival seq is that mark's)."""
        if frame_type != REQUEST:
            return
        req = data.get("req")
        if req not in state.requests:
            self.made_by_marks += 1
            self.arrival_seqs[req] = seq
        elif data.get("kind") == ARRIVED:
            self.touched = True  # the table's arrival seq moves; the fold's row stays

    def _check(self, req: str, unscheduled: dict[str, None]) -> None:
        if (req in self.pending) != (req in unscheduled):
            self.apart.add(req)
        else:
            self.apart.discard(req)

    def _touched(self, d: Any, unscheduled: dict[str, None]) -> None:
        if self.touched:
            return
        keys = unscheduled.keys()
        for reqs in (d["sampled"], d.get("placeholders", ()), d.get("accepted", ())):
            if not keys.isdisjoint(reqs):  # (256 sampled a step: no Python-level walk)
                self.touched = True
                return

    def agrees(self, state: Folded) -> bool:
        """The marks hold pending exactly the fold's never-scheduled rows. (A row the fold
        made without a mark is in its index alone: the counts differ.)"""
        return not self.apart and len(self.pending) == len(state.index.unscheduled)

    def taken(self, size: int) -> None:
        self.clock.taken(size)

    def apart_checkpoint(self, state: Folded) -> tuple[dict[str, RequestRow], LeftOut] | None:
        """At a step end (the marks of the step all seen) under a long queue: the fold's
        rows but the never-scheduled (settled, in the fold's order) and what rebuilds
        those from the requests table (app.db.checkpoint_queue); None where the table
        would not give the fold's rows back exactly (the caller stores them whole)."""
        step_reasons = state.reasons
        if (
            len(self.pending) < PENDING_APART
            or self.touched
            or not self.agrees(state)
            or self.made_by_marks != state.num_requests
            or step_reasons.default is None
            or step_reasons.step != state.step
        ):
            return None
        requests, index, seqs = state.requests, state.index, self.arrival_seqs
        kept = dict.fromkeys(chain(index.started, (r for r in index.done if r in requests)))
        if len(kept) + len(index.unscheduled) != len(requests) or not all(r in seqs for r in kept):
            return None  # a row none of the three (an end the marks did not say)
        order = sorted(kept, key=seqs.__getitem__)  # the fold's: its rows came in mark order
        rows = {r: requests[r] for r in order}
        state.settle(rows.values())
        marks = self.pending
        left_out: LeftOut = {
            "count": len(marks),
            "from_step": next(iter(marks.values()), 0),
            "default": step_reasons.default,
            "exceptions": {r: e for r, e in step_reasons.exceptions.items() if r in marks},
            "seqs": [seqs[r] for r in order],
        }
        return rows, left_out

    def waits(self, clock: CheckpointClock) -> bool:
        """Whether a due checkpoint waits for the step's end (apart_checkpoint), up to
        twice its clock's frames."""
        return (
            len(self.pending) >= PENDING_APART
            and not self.touched
            and clock.frames < 2 * clock.max_frames
        )

    def _base(self, state: Folded, rows: dict[str, Any]) -> LiveRows:
        return {
            "seq": state.seq,
            "step": state.step,
            "rows": rows,
            "in_flight": sorted(state.in_flight),
            "waiting_detail": state.waiting_detail,
            "pending": None,
            "pending_from": None,
            "reasons": None,
        }

    def _whole(self, state: Folded) -> LiveRows:
        requests, index = state.requests, state.index
        rows = {r: requests[r] for r in chain(index.unscheduled, index.started)}
        state.settle(rows.values())
        return self._base(state, rows)

    def _apart(self, state: Folded) -> LiveRows | None:
        # Taken at step ends of a long queue: the fold's index holds the rows not left
        # out, so a take costs what runs, not the queue.
        if not self.agrees(state):
            return None  # the requests table would not tell the left-out rows apart
        requests, marks = state.requests, self.pending
        rows = {r: requests[r] for r in state.index.started}
        state.settle(rows.values())
        step_reasons = state.reasons
        exceptions: dict[str, str | None]
        if step_reasons.default is not None:
            # Compact reasons of this step, where every pending request waits: its default
            # and the exceptions among them, without a look at their rows.
            default: str | None = step_reasons.default
            exceptions = {r: e for r, e in step_reasons.exceptions.items() if r in marks}
        else:
            order = list(marks)
            reason_of = list(map(_WAITING_REASON, map(requests.__getitem__, order)))
            reasons = Counter(reason_of)
            default = reasons.most_common(1)[0][0] if reasons else None
            exceptions = {
                req: reason
                for req, reason in zip(order, reason_of, strict=True)
                if reason != default
            }
        n = len(marks)
        if len(exceptions) > MAX_EXCEPTIONS:
            return None
        out = self._base(state, rows)
        out["pending"] = n
        out["pending_from"] = next(iter(marks.values()), None)
        out["reasons"] = {"default": default, "exceptions": exceptions}
        return out
