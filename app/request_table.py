"""The request table's rows as its JSON twin serves them: each request of a session state
with TTFT / ITL / E2E, its current phase and why it waits (worded with the step's
numbers, engine.waiting), filtered and sorted like the page's table (static/js/filters.js
implements the same query on the browser's model: keep the two in step; its words and
operators below are generated into static/js/query.js).

Query: `status` (comma list of running, waiting, preempted, finished, rejected),
`reason` (a waiting reason code), `priority`, `phase` (prefill | decode, of running
requests), `prefix_hit` and `preempted` (yes | no), `q` (substring of the id, any case),
`sort` (arrival | ttft | e2e | preemptions; `-` first for descending; unknown values
last), `offset`, `limit`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, NamedTuple, cast

from fastapi import Query
from fastapi.exceptions import RequestValidationError
from sqlalchemy.orm import Session

from app.db import queries
from app.db.live_view import live_view_at
from app.db.request_rows import Pending, arrival_seqs
from app.db.request_segments import closed
from app.edge.bounds import INT32_MAX
from app.forms import FormError
from protocol.codes import Phase, RequestStatus
from protocol.views import TableRow

STATUSES = tuple(s.lower() for s in RequestStatus)  # the query spells them in lower case
PHASES = tuple(p.value for p in Phase)
SORT_FIELDS = {"ttft": "ttft", "e2e": "e2e", "preemptions": "num_preemptions"}
"""The sorts by a row's value (unknown values last): sort -> the row's field."""
SORTS = ("arrival", *SORT_FIELDS)
"""Every sort; the first, the order of arrival, is the default."""
DESCENDING = "-"
"""Before a sort: descending."""
LIST_SEPARATOR = ","
"""Between the statuses of `status`."""
YES = {"yes": True, "true": True, "1": True, "no": False, "false": False, "0": False}
ANY = "any"
"""A yes/no filter's word for "either" (as the empty value)."""


@dataclass(frozen=True, slots=True)
class RequestQuery:
    status: frozenset[str] = frozenset()
    reason: str | None = None
    priority: int | None = None
    phase: str | None = None
    prefix_hit: bool | None = None
    preempted: bool | None = None
    q: str = ""
    sort: str = "arrival"
    descending: bool = False
    offset: int = 0
    limit: int | None = None

    def matches(self, row: Mapping[str, Any]) -> bool:
        if self.status and row["status"].lower() not in self.status:
            return False
        if self.reason is not None and row.get("waiting_reason") != self.reason:
            return False
        if self.priority is not None and row.get("priority") != self.priority:
            return False
        if self.phase is not None and row.get("phase") != self.phase:
            return False
        if self.prefix_hit is not None and bool(row.get("prefix_hit")) != self.prefix_hit:
            return False
        if self.preempted is not None and bool(row.get("num_preemptions")) != self.preempted:
            return False
        return not self.q or self.q in str(row["req"]).lower()


def _flag(params: Mapping[str, str], key: str) -> bool | None:
    value = (params.get(key) or "").strip().lower()
    if not value or value == ANY:
        return None
    if value not in YES:
        raise FormError(f"{key}: yes or no")
    return YES[value]


def _int(params: Mapping[str, str], key: str, low: int, high: int = INT32_MAX) -> int | None:
    value = (params.get(key) or "").strip()
    if not value:
        return None
    try:
        n = int(value)
    except ValueError:
        raise FormError(f"{key}: an integer") from None
    if not low <= n <= high:
        raise FormError(f"{key}: between {low} and {high}")
    return n


def parse_query(params: Mapping[str, str]) -> RequestQuery:
    """The query from URL parameters; FormError (-> 422) names the bad one."""
    listed = (params.get("status") or "").split(LIST_SEPARATOR)
    status = frozenset(s.strip().lower() for s in listed if s)
    if not status <= set(STATUSES):
        raise FormError(f"status: any of {', '.join(STATUSES)}")
    phase = (params.get("phase") or "").strip().lower() or None
    if phase is not None and phase not in PHASES:
        raise FormError("phase: prefill or decode")
    sort = (params.get("sort") or SORTS[0]).strip().lower()
    descending = sort.startswith(DESCENDING)
    if sort.lstrip(DESCENDING) not in SORTS:
        raise FormError(f"sort: one of {', '.join(SORTS)} (- first: descending)")
    return RequestQuery(
        status=status,
        reason=(params.get("reason") or "").strip() or None,
        priority=_int(params, "priority", -(2**31)),
        phase=phase,
        prefix_hit=_flag(params, "prefix_hit"),
        preempted=_flag(params, "preempted"),
        q=(params.get("q") or "").strip().lower()[:200],
        sort=sort.lstrip(DESCENDING),
        descending=descending,
        offset=_int(params, "offset", 0) or 0,
        limit=_int(params, "limit", 0),
    )


async def request_query(
    status: Annotated[str | None, Query(description="comma list: " + ", ".join(STATUSES))] = None,
    reason: Annotated[str | None, Query(description="a waiting reason code")] = None,
    priority: Annotated[int | None, Query(ge=-INT32_MAX - 1, le=INT32_MAX)] = None,
    phase: Annotated[str | None, Query(description="prefill | decode (running)")] = None,
    prefix_hit: Annotated[str | None, Query(description="yes | no")] = None,
    preempted: Annotated[str | None, Query(description="yes | no")] = None,
    q: Annotated[str | None, Query(description="a substring of the id")] = None,
    sort: Annotated[
        str | None, Query(description="arrival | ttft | e2e | preemptions; -: descending")
    ] = None,
    offset: Annotated[int, Query(ge=0, le=INT32_MAX)] = 0,
    limit: Annotated[int | None, Query(ge=0, le=INT32_MAX)] = None,
) -> RequestQuery:
    """The query as a route dependency (documented parameters; a bad one: 422 naming it)."""
    given = {
        "status": status,
        "reason": reason,
        "priority": priority,
        "phase": phase,
        "prefix_hit": prefix_hit,
        "preempted": preempted,
        "q": q,
        "sort": sort,
        "offset": offset,
        "limit": limit,
    }
    try:
        return parse_query({k: str(v) for k, v in given.items() if v is not None})
    except FormError as exc:
        field, _, msg = str(exc).partition(": ")
        error = {"loc": ("query", field), "msg": msg, "type": "value_error"}
        raise RequestValidationError([error]) from None


def select_rows(rows: list[TableRow], query: RequestQuery) -> list[TableRow]:
    """The rows `query` keeps, in its order, paged by offset / limit."""
    kept = [r for r in rows if query.matches(r)]
    if query.sort in SORT_FIELDS:
        key = SORT_FIELDS[query.sort]
        known = [r for r in kept if _get(r, key) is not None]
        known.sort(key=lambda r: _get(r, key), reverse=query.descending)  # ties: arrival
        kept = known + [r for r in kept if _get(r, key) is None]
    elif query.descending:
        kept.reverse()
    end = None if query.limit is None else query.offset + query.limit
    return kept[query.offset : end]


def _get(row: Mapping[str, Any], key: str) -> Any:
    """A row's value of a key chosen at run time (the sort key)."""
    return row.get(key)


LIVE_CACHE_STATES = 16


class LiveRows(NamedTuple):
    rows: list[dict[str, Any]]
    pending: Pending | None
    seq: int
    """The step's last frame: what the rows are as of."""


_live_cache: OrderedDict[tuple[str, str, int], LiveRows] = OrderedDict()
_live_lock = threading.Lock()


def clear_live_cache() -> None:
    """Forget the kept rows (a recording's stored rows changed under them: tests)."""
    with _live_lock:
        _live_cache.clear()


def live_rows_at(db: Session, session_id: str, step: int) -> LiveRows:
    """The table rows at `step` of requests not done by then (running, waiting,
    preempted; and a request whose end is marked for the next step), with their
    `arrival_seq` (from the database); and, when the waiting queue was long, the
    never-scheduled waiting requests left to the requests table (app.db.live_view).
    The frames up to a step never change, so the rows of the latest few steps asked for
    are kept (shared: read them, never change them): paging through one step's table
    folds its state once."""
    seq = queries.last_seq_at_step(db, session_id, step)
    key = (str(db.get_bind().engine.url), session_id, seq)
    with _live_lock:
        cached = _live_cache.get(key)
        if cached is not None:
            _live_cache.move_to_end(key)
            return cached._replace(rows=list(cached.rows))
    view = live_view_at(db, session_id, step, seq)
    pending = None if view is None else view.pending
    state = queries.state_at_seq(db, session_id, seq) if view is None else view.fold
    rows: list[dict[str, Any]] = [  # request_rows' dicts are its own
        cast(dict[str, Any], r)
        for r in state.request_rows()
        if r["finish_step"] is None or r["finish_step"] > step
    ]
    for r in rows:  # for the replay Gantt (app.db.request_segments)
        r["segments"] = closed(state.requests[r["req"]]["segments"], step)
    # Few rows (the pending ones left out): read by id; else in one walk of the index.
    seqs = arrival_seqs(
        db, session_id, [r["req"] for r in rows], None if len(rows) < 1000 else step
    )
    for r in rows:
        r["arrival_seq"] = seqs.get(r["req"])
    with _live_lock:
        _live_cache[key] = LiveRows(rows, pending, seq)
        while len(_live_cache) > LIVE_CACHE_STATES:
            _live_cache.popitem(last=False)
    return LiveRows(list(rows), pending, seq)
