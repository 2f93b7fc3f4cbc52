"""Tables of the experiment lab: a sweep (its source, knobs and status) and its points
(each run's knob values, repeat, figures, and the session it was opened as)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base


class LabSweepRecord(Base):
    __tablename__ = "lab_sweeps"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    experiment: Mapped[str | None] = mapped_column(String(64), nullable=True)
    """The ready experiment it ran (app/lab/experiments/NAME.json), if any."""
    source: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    """What the workload came from, for people: {"kind": ..., "label": ...}."""
    base: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    """The base scenario every point starts from (so a point can be re-run later)."""
    knobs: Mapped[list[Any]] = mapped_column(JSON, default=list)
    """[{"name": ..., "values": [...]}]: one knob, or two for a grid."""
    repeat: Mapped[int] = mapped_column(Integer, default=1)
    runner: Mapped[str] = mapped_column(String(32), default="sim")
    cost_model: Mapped[str | None] = mapped_column(String(300), nullable=True)
    status: Mapped[str] = mapped_column(String(16), default="queued")
    """queued, running, done, cancelled, interrupted (the server stopped) or failed."""
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    num_points: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class LabPointRecord(Base):
    __tablename__ = "lab_points"

    sweep_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("lab_sweeps.id", ondelete="CASCADE"), primary_key=True
    )
    point_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    knobs: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    repeat: Mapped[int] = mapped_column(Integer, default=0)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    session_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    """The recorded session this point was opened as (None until someone opens it)."""
