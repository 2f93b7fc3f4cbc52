"""RowIndex: which of a fold's request rows are waiting never scheduled, started, or
done, so that what reads the live ones (the recorder's writer: app.db.live_rows) walks
them, not a waiting queue of tens of thousands; and the done rows it keeps (the oldest
are dropped past MAX_DONE_ROWS: they stay in the database's requests table)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, MutableMapping

from protocol.codes import RequestStatus
from protocol.views import RequestRow

WAITING = RequestStatus.WAITING.value
DONE = (RequestStatus.FINISHED.value, RequestStatus.REJECTED.value)
MAX_DONE_ROWS = 500
"""Finished/rejected rows kept in the fold. Bounds memory, snapshots and checkpoints of
long sessions (a checkpoint is mostly these rows: 2000 of them made checkpoints most of
a recording)."""


class RowIndex:
    def __init__(self) -> None:
        self.unscheduled: dict[str, None] = {}
        """Rows waiting, never scheduled, not ended: oldest first."""
        self.started: dict[str, None] = {}
        """Rows scheduled at least once, not done (running, preempted)."""
        self.done: deque[str] = deque()
        """Ended rows kept, oldest first."""
        self.dropped = 0
        """Done rows dropped from the fold."""

    def added(self, req: str) -> None:
        """A new row (waiting since its arrival)."""
        self.unscheduled[req] = None

    def scheduled(self, req: str) -> None:
        """`req` runs, or was preempted: it was scheduled."""
        self.unscheduled.pop(req, None)
        self.started[req] = None

    def ended(self, req: str) -> None:
        self.unscheduled.pop(req, None)
        self.started.pop(req, None)

    def retire(self, req: str, requests: MutableMapping[str, RequestRow]) -> None:
        """`req` ended (its end mark): kept among the done rows, the oldest dropped."""
        self.ended(req)
        self.done.append(req)
        while len(self.done) > MAX_DONE_ROWS:
            old = self.done.popleft()
            row = requests.get(old)
            if row is not None and row["status"] in DONE:
                del requests[old]
                self.dropped += 1

    def rebuild(self, requests: Iterable[tuple[str, RequestRow]]) -> None:
        """`unscheduled` and `started` from rows set whole (a checkpoint, live rows)."""
        self.unscheduled, self.started = {}, {}
        for req, row in requests:
            if row["status"] in DONE:
                continue
            if (
                row["status"] == WAITING
                and row["first_scheduled_step"] is None
                and row["finish_step"] is None
            ):
                self.unscheduled[req] = None
            else:
                self.started[req] = None
