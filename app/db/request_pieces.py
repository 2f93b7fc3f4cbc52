"""How a request page reads the database's run of rows (app.db.request_page): as
consecutive pieces, each in one order an index gives (`plan_pieces`), read forwards or
backwards (`Piece.back`), and a read row's sort keys alone (`key_row`) for the merge."""

from __future__ import annotations

from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, and_, or_
from sqlalchemy.sql import operators

from app.db.request_rows import ROW_KEYS, SORT_COLUMNS, R


class Piece(NamedTuple):
    """Rows of the database's run in one order an index gives."""

    where: ColumnElement[bool]
    walk: ColumnElement[bool] | None
    """Done rows only: the same rows, for a window read by walking the index of `order`
    (the finish step's range hidden from the planner: `+ 0`)."""
    order: list[Any]
    done: str | None
    """Which done rows it holds (app.db.done_counts kinds), None: none."""
    pending: bool
    """Whether it holds the never-scheduled waiting rows."""

    def back(self) -> list[Any]:
        """`order` reversed (each column the other way: a total order, so exactly)."""
        return [_flip(c) for c in self.order]


def _flip(c: Any) -> Any:
    modifier = getattr(c, "modifier", None)
    if modifier is operators.desc_op:
        return c.element.asc()
    if modifier is operators.asc_op:
        return c.element.desc()
    return c.desc()


def plan_pieces(
    session_id: str,
    query: Any,
    step: int,
    done: list[ColumnElement[bool]] | None,
    pend: list[ColumnElement[bool]] | None,
) -> list[Piece]:
    """The database's rows in the table's order, as consecutive pieces: a never-scheduled
    waiting row has no TTFT nor E2E (unknown: last, in arrival order) and no preemption
    (0), whatever the requests table says of its later life."""
    arrival: list[Any] = [R.arrival_step, R.arrival_seq, R.req_id]
    d = and_(*done) if done is not None else None
    p = and_(*pend) if pend is not None else None
    hidden = (
        None if done is None else [R.finish_step + 0 <= step if c is done[1] else c for c in done]
    )

    def union(*parts: ColumnElement[bool] | None) -> ColumnElement[bool] | None:
        kept = [x for x in parts if x is not None]
        if len(kept) < 2:
            return kept[0] if kept else None
        # Both arrived by the step: one range of the order index holds them (the
        # session and the range outside the OR, where a planner sees them).
        return and_(R.session_id == session_id, R.arrival_step <= step, or_(*kept))

    def only(extra: ColumnElement[bool]) -> ColumnElement[bool] | None:
        return None if d is None else and_(d, extra)

    def piece(
        where: ColumnElement[bool] | None, order: list[Any], kind: str, extra: Any = None
    ) -> Any:
        if where is None:
            return None
        walk = None
        if hidden is not None and (where is d or extra is not None):
            walk = and_(*hidden) if extra is None else and_(*hidden, extra)
        return Piece(where, walk, order, None if d is None else kind, p is not None)

    pieces: list[Piece | None]
    if query.sort == "arrival":
        order = [c.desc() for c in arrival] if query.descending else arrival
        pieces = [piece(union(d, p), order, "all")]
    else:
        col = SORT_COLUMNS[query.sort]
        by_value = [col.desc() if query.descending else col.asc(), *arrival]
        if query.sort == "preemptions":
            ran = piece(only(col > 0), by_value, "ran", col > 0)
            if ran is not None:
                ran = ran._replace(pending=False)
            pieces = [ran, piece(union(only(col == 0), p), arrival, "idle")]
            if not query.descending:
                pieces.reverse()
        else:
            known = piece(only(col.is_not(None)), by_value, "+" + query.sort, col.is_not(None))
            if known is not None:
                known = known._replace(pending=False)
            pieces = [known, piece(union(only(col.is_(None)), p), arrival, "-" + query.sort)]
    return [x for x in pieces if x is not None]


def key_row(
    req: str, step: int | None, seq: int | None, value: Any, query: Any, pending: bool = False
) -> dict[str, Any]:
    """A database row's sort keys only (what app.db.request_rows.sort_key reads), as
    done_row (or pending_row) would give them (a rejection's E2E is NULL in the database
    too)."""
    row: dict[str, Any] = {"req": req, "arrived_step": step, "arrival_seq": seq}
    row["_pending" if pending else "_done"] = True
    if query.sort != "arrival":
        if pending:
            value = 0 if query.sort == "preemptions" else None
        row[ROW_KEYS[query.sort]] = value
    return row
