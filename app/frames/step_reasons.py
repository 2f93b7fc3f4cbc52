"""StepReasons: the waiting reasons of a session's latest step, as the fold keeps them.

An `iteration` frame names every waiting request's reason (`waiting_reasons`), or, with
`waiting_default`, only the exceptions to the step's default: under overload the queue is
tens of thousands of requests, and writing each one's reason into its row every step made
a long recording quadratic. So the fold keeps the latest step's default and exceptions,
and a waiting row's reason is resolved when the rows are read (`settle`), or when the row
stops waiting (`freeze`). Rows then read exactly as a fold that wrote every reason every
step: a request's reason is that of the latest step it waited at.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from protocol.codes import RequestStatus
from protocol.views import RequestRow
from protocol.wire import IterationData

WAITING, PREEMPTED = RequestStatus.WAITING.value, RequestStatus.PREEMPTED.value


class StepReasons:
    def __init__(self) -> None:
        self.default: str | None = None
        """The reason of every request waiting at `step` but the `exceptions`. None: the
        latest frame named every waiting request (or none waited): the rows hold them."""
        self.step = -1
        self.exceptions: Mapping[str, str] = {}

    def apply(self, d: IterationData, requests: dict[str, RequestRow]) -> None:
        """Fold step `d`'s reasons; `requests`: the fold's rows (after `d`'s changes)."""
        default = d.get("waiting_default")
        if default is None and self.default is not None:
            self.settle(requests.values())  # a full map after compact ones
            self.default, self.exceptions = None, {}
        for req, reason in d["waiting_reasons"].items():
            row = requests.get(req)
            if row is not None:
                row["waiting_reason"] = reason
        if default is not None:
            self.default, self.step, self.exceptions = default, d["step"], d["waiting_reasons"]

    def reason_of(self, row: RequestRow) -> str | None:
        """`row`'s waiting reason as of the latest step. A row waits at it if its status
        is waiting or preempted and it arrived by then (an `arrived` mark precedes the
        frame of its step)."""
        default = self.default
        if (
            default is not None
            and (row["status"] == WAITING or row["status"] == PREEMPTED)
            and row["arrived_step"] <= self.step
        ):
            return self.exceptions.get(row["req"], default)
        return row["waiting_reason"]

    def freeze(self, row: RequestRow) -> None:
        """`row` is about to stop waiting (it ends): it keeps the reason it had."""
        if self.default is not None:
            row["waiting_reason"] = self.reason_of(row)

    def settle(self, rows: Iterable[RequestRow]) -> None:
        """Write the reasons as of the latest step into `rows`."""
        if self.default is None:
            return
        reason_of = self.reason_of
        for row in rows:
            row["waiting_reason"] = reason_of(row)
