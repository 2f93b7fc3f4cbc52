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
"""

from __future__ import annotations

import base64
import json
import zlib
from collections import Counter
from collections.abc import Iterable
from operator import itemgetter
from typing import Any, Protocol, TypedDict

from app.db.checkpoint_codec import LEVEL, CheckpointClock
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
DONE = (RequestStatus.FINISHED.value, RequestStatus.REJECTED.value)
ITERATION, REQUEST = FrameType.ITERATION.value, FrameType.REQUEST.value
SESSION, CLOSED = FrameType.SESSION.value, SessionEvent.CLOSED.value
ARRIVED, SCHEDULED = RequestMark.ARRIVED.value, RequestMark.SCHEDULED.value
ENDS = (RequestMark.FINISHED.value, RequestMark.ABORTED.value, RequestMark.REJECTED.value)
_STATUS, _FIRST_SCHEDULED, _FINISH_STEP, _WAITING_REASON = (
    itemgetter("status"), itemgetter("first_scheduled_step"), itemgetter("finish_step"),
    itemgetter("waiting_reason"),
)  # fmt: skip


class Folded(Protocol):
    """What the taker reads of a session's fold (app.frames.fold.SessionState)."""

    @property
    def seq(self) -> int: ...
    @property
    def step(self) -> int: ...
    @property
    def requests(self) -> dict[str, RequestRow]: ...
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
    raw = json.dumps(data, separators=(",", ":")).encode()
    return PREFIX + base64.b64encode(zlib.compress(raw, LEVEL)).decode("ascii")


def decode_live_rows(text: str) -> LiveRows:
    data: LiveRows = json.loads(zlib.decompress(base64.b64decode(text[len(PREFIX) :])))
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

    def before(self, state: Folded, frame_type: str, data: Any) -> LiveRows | None:
        """Called before `state` folds a frame: the live rows at the end of its step if
        the frame starts a later step and some are due, or if it closes the session (its
        last step then pages like any other, however long the queue it ended with)."""
        if frame_type == SESSION and data.get("event") == CLOSED:
            if state.step < 0 or state.step != self.seen_step:
                return None
            apart = self._apart(state) if len(self.pending) >= PENDING_APART else None
            return apart or self._whole(state)
        step = data.get("step") if frame_type in (ITERATION, REQUEST) else None
        if not isinstance(step, int) or step <= self.seen_step or state.step != self.seen_step:
            return None  # not the first frame of a later step, or a step without a frame
        if state.step < 0:
            return None
        if not self.clock.due():
            return None
        return self._apart(state) if len(self.pending) >= PENDING_APART else self._whole(state)

    def after(self, frame_type: str, data: Any, text: str) -> None:
        """Called after the fold took the frame (`text`: its stored text)."""
        self.clock.add(text)
        step = data.get("step") if frame_type in (ITERATION, REQUEST) else None
        if isinstance(step, int) and step > self.seen_step:
            self.seen_step = step
        if frame_type != REQUEST:
            return
        kind, req = data.get("kind"), data.get("req")
        if kind == ARRIVED:
            self.pending[req] = data.get("step", 0)
        elif kind == SCHEDULED or kind in ENDS:
            self.pending.pop(req, None)

    def taken(self, size: int) -> None:
        self.clock.taken(size)

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
        rows = {r: row for r, row in state.requests.items() if row["status"] not in DONE}
        state.settle(rows.values())
        return self._base(state, rows)

    def _apart(self, state: Folded) -> LiveRows | None:
        # Taken at every step end of a long queue: each pass over the pending rows reads
        # one field of all of them at once (itemgetter maps), not row by row in Python,
        # so a step end costs little more than a dict walk however long the queue.
        requests, marks = state.requests, self.pending
        order = [req for req in requests if req in marks]
        if len(order) != len(marks):
            return None  # a mark without a row: the marks do not say what the fold says
        pend = list(map(requests.__getitem__, order))
        n = len(pend)
        if (
            list(map(_STATUS, pend)).count(WAITING) != n
            or list(map(_FIRST_SCHEDULED, pend)).count(None) != n
            or list(map(_FINISH_STEP, pend)).count(None) != n
        ):
            return None  # a request the marks hold pending, the fold does not
        rows: dict[str, Any] = {}
        for req in requests:
            if req in marks:
                continue
            row = requests[req]
            if row["status"] in DONE:
                continue
            if never_scheduled(row):
                return None  # pending in the fold, not by the marks
            rows[req] = row
        state.settle(rows.values())
        step_reasons = state.reasons
        exceptions: dict[str, str | None]
        if step_reasons.default is not None:
            # Compact reasons of this step, where every pending request waits: its default
            # and the exceptions among them, without a look at their rows.
            default: str | None = step_reasons.default
            exceptions = {r: e for r, e in step_reasons.exceptions.items() if r in marks}
        else:
            reason_of = list(map(_WAITING_REASON, pend))
            reasons = Counter(reason_of)
            default = reasons.most_common(1)[0][0] if reasons else None
            exceptions = {
                req: reason
                for req, reason in zip(order, reason_of, strict=True)
                if reason != default
            }
        if len(exceptions) > MAX_EXCEPTIONS:
            return None
        out = self._base(state, rows)
        out["pending"] = n
        out["pending_from"] = next(iter(marks.values()), None)
        out["reasons"] = {"default": default, "exceptions": exceptions}
        return out
