"""PostgreSQL's planner statistics of the tables a recording grows, kept current by the
recorder's writer.

PostgreSQL plans a query from statistics that only ANALYZE refreshes (autovacuum runs it
when it is on, at most once a minute a table; an administrator may have turned it off).
A recording grows its tables from nothing to hundreds of thousands of rows in minutes,
and a table last analyzed when it held a few rows is planned as if it still did: a seek's
lookup of 256 requests by primary key then scans every request of the session (measured
at 20,000 requests: 7-14 ms a statement instead of 1; seeks p50 50 ms instead of 23, and
over 100 ms at 100,000 requests).

So the writer, every CHECK_EVERY_S while it writes, reads `pg_stat_user_tables` and
analyzes each of batchscope's tables changed by at least as many rows as it holds since
its last ANALYZE (and at least MIN_CHANGED): about log(rows) times over a recording's
life, each sampling a bounded number of rows. SKIP_LOCKED: a table autovacuum is
analyzing is left to it. Nothing to do on SQLite, whose planner needs no statistics for
these indexes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from app.db import models  # noqa: F401  (every table joins the metadata)
from app.db.base import Base

log = logging.getLogger("batchscope.writer")

CHECK_EVERY_S = 5.0
MIN_CHANGED = 1000
"""Rows changed since a table's last ANALYZE below which it is not analyzed again."""

_STALE = text(
    "SELECT relname, n_live_tup, n_mod_since_analyze FROM pg_stat_user_tables "
    "WHERE relid = to_regclass(relname::text)"  # the tables search_path finds, as queries do
)


class PlannerStats:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        check_every_s: float = CHECK_EVERY_S,
        min_changed: int = MIN_CHANGED,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        bind = sessions.kw.get("bind")
        self.enabled = bind is not None and bind.dialect.name == "postgresql"
        self.sessions = sessions
        self.check_every_s = check_every_s
        self.min_changed = min_changed
        self.clock = clock
        self.tables = frozenset(Base.metadata.tables)
        self.analyzed = 0
        """ANALYZE statements run."""
        self._next_check = 0.0

    def tick(self, now: bool = False) -> list[str]:
        """Analyze the tables due (checked at most every `check_every_s`, or `now`);
        returns their names. A failure is logged and waits for the next check: the
        statistics are only the planner's."""
        if not self.enabled or (not now and self.clock() < self._next_check):
            return []
        self._next_check = self.clock() + self.check_every_s
        try:
            with self.sessions() as db:
                due = sorted(
                    name
                    for name, live, changed in db.execute(_STALE)
                    if name in self.tables and changed and changed >= max(self.min_changed, live)
                )
            for name in due:
                with self.sessions.begin() as db:
                    db.execute(text(f'ANALYZE (SKIP_LOCKED) "{name}"'))
                self.analyzed += 1
        except Exception:
            log.warning("planner statistics not refreshed", exc_info=True)
            return []
        return due
