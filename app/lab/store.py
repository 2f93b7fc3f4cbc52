"""The lab's sweeps in the database: created before they run, each point written as it
finishes (so a crash or a restart keeps what finished), read back as plain dicts."""

from __future__ import annotations

import secrets
import time
from typing import Any, cast

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session, sessionmaker
from typing_extensions import TypedDict

from app.db.lab_models import LabPointRecord, LabSweepRecord
from app.db.session import write_transaction
from app.errors import NotFound
from app.lab.scenario_types import BaseScenario, SweepSource
from app.lab.spec import KnobRange, SweepSpec
from engine.sweep import PointResult
from protocol.wire import Knobs

UNFINISHED = ("queued", "running")


class PointRow(TypedDict):
    index: int
    knobs: Knobs
    repeat: int
    metrics: dict[str, float]
    """engine.run_metrics: latencies as `<name>_p50/_p95/_p99` in ms, and totals."""
    error: str | None
    stopped: dict[str, Any] | None
    """The run was cut short (engine.simulate's `stopped`): its figures cover what ran."""
    session: str | None


class SweepRow(TypedDict):
    id: str
    name: str
    experiment: str | None
    source: SweepSource
    knobs: list[KnobRange]
    repeat: int
    runner: str
    cost_model: str | None
    status: str
    error: str | None
    num_points: int
    num_done: int
    created_at: float
    started_at: float | None
    finished_at: float | None


class SweepDetail(SweepRow):
    base: BaseScenario
    points: list[PointRow]


def new_sweep_id() -> str:
    return time.strftime("lab-%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def create_sweep(db: sessionmaker[Session], spec: SweepSpec, num_points: int) -> str:
    sweep_id = new_sweep_id()
    with write_transaction(db) as s:
        s.add(
            LabSweepRecord(
                id=sweep_id,
                name=spec.title()[:200],
                experiment=spec.experiment,
                source=spec.source,
                base=spec.base,
                knobs=spec.knob_dicts(),
                repeat=spec.repeat,
                runner=spec.runner,
                cost_model=spec.cost_model,
                status="queued",
                num_points=num_points,
                created_at=time.time(),
            )
        )
    return sweep_id


STOPPED_KEY = "stopped"
"""Where a point's `stopped` is kept in its metrics column (never a figure)."""


def add_point(db: sessionmaker[Session], sweep_id: str, res: PointResult) -> None:
    with write_transaction(db) as s:
        s.merge(
            LabPointRecord(
                sweep_id=sweep_id,
                point_index=res.point.index,
                knobs=res.point.knobs,
                repeat=res.point.repeat,
                # A cut-short run keeps its `stopped` beside its figures (the column is JSON).
                metrics={**res.metrics, STOPPED_KEY: res.stopped} if res.stopped else res.metrics,
                error=res.error,
            )
        )


def set_status(
    db: sessionmaker[Session], sweep_id: str, status: str, error: str | None = None
) -> None:
    now = time.time()
    values: dict[str, Any] = {"status": status, "error": error}
    if status == "running":
        values["started_at"] = now
    elif status not in UNFINISHED:
        values["finished_at"] = now
    with write_transaction(db) as s:
        s.execute(update(LabSweepRecord).where(LabSweepRecord.id == sweep_id).values(**values))


def interrupt_unfinished(db: sessionmaker[Session]) -> int:
    """At start: sweeps a previous server left queued or running will never finish."""
    with write_transaction(db) as s:
        result = s.execute(
            update(LabSweepRecord)
            .where(LabSweepRecord.status.in_(UNFINISHED))
            .values(status="interrupted", finished_at=time.time())
        )
        return int(getattr(result, "rowcount", 0) or 0)


def set_point_session(db: sessionmaker[Session], sweep_id: str, index: int, session: str) -> None:
    with write_transaction(db) as s:
        s.execute(
            update(LabPointRecord)
            .where(LabPointRecord.sweep_id == sweep_id, LabPointRecord.point_index == index)
            .values(session_id=session)
        )


def delete_sweep(db: sessionmaker[Session], sweep_id: str) -> None:
    with write_transaction(db) as s:
        if s.get(LabSweepRecord, sweep_id) is None:
            raise NotFound(f"no sweep {sweep_id!r}")
        s.execute(delete(LabPointRecord).where(LabPointRecord.sweep_id == sweep_id))
        s.execute(delete(LabSweepRecord).where(LabSweepRecord.id == sweep_id))


def _row(rec: LabSweepRecord, num_done: int) -> SweepRow:
    return {
        "id": rec.id,
        "name": rec.name,
        "experiment": rec.experiment,
        "source": cast(SweepSource, rec.source),
        "knobs": rec.knobs,
        "repeat": rec.repeat,
        "runner": rec.runner,
        "cost_model": rec.cost_model,
        "status": rec.status,
        "error": rec.error,
        "num_points": rec.num_points,
        "num_done": num_done,
        "created_at": rec.created_at,
        "started_at": rec.started_at,
        "finished_at": rec.finished_at,
    }


def list_sweeps(db: sessionmaker[Session], limit: int = 200) -> list[SweepRow]:
    """Newest first, with how many points each has finished."""
    done = (
        select(LabPointRecord.sweep_id, func.count().label("n"))
        .group_by(LabPointRecord.sweep_id)
        .subquery()
    )
    with db() as s:
        rows = s.execute(
            select(LabSweepRecord, done.c.n)
            .outerjoin(done, done.c.sweep_id == LabSweepRecord.id)
            .order_by(LabSweepRecord.created_at.desc())
            .limit(limit)
        ).all()
        return [_row(rec, int(n or 0)) for rec, n in rows]


def get_sweep(db: sessionmaker[Session], sweep_id: str) -> SweepDetail:
    with db() as s:
        rec = s.get(LabSweepRecord, sweep_id)
        if rec is None:
            raise NotFound(f"no sweep {sweep_id!r}")
        points = s.scalars(
            select(LabPointRecord)
            .where(LabPointRecord.sweep_id == sweep_id)
            .order_by(LabPointRecord.point_index)
        ).all()
        return {
            **_row(rec, len(points)),
            "base": cast(BaseScenario, rec.base),
            "points": [
                {
                    "index": p.point_index,
                    "knobs": p.knobs,
                    "repeat": p.repeat,
                    "metrics": {k: v for k, v in p.metrics.items() if k != STOPPED_KEY},
                    "error": p.error,
                    "stopped": p.metrics.get(STOPPED_KEY),
                    "session": p.session_id,
                }
                for p in points
            ],
        }
