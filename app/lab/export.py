"""A sweep's points as CSV (one row per run: knobs, repeat, every figure) or JSON, the
same for `batchscope sweep --out` and the lab's download links."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Any

from app.lab.store import PointRow, SweepDetail
from app.lab.views import cost_model_info
from engine.sweep import PointResult, SweepPoint, iter_rows


def results_of(points: Iterable[PointRow]) -> list[PointResult]:
    return [
        PointResult(
            SweepPoint(p["index"], p["knobs"], p["repeat"]),
            p["metrics"],
            p["error"],
            p.get("stopped"),
        )
        for p in points
    ]


def csv_text(results: list[PointResult]) -> str:
    rows = list(iter_rows(results))
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    if "error" in columns:  # last, where a spreadsheet shows it best
        columns.remove("error")
        columns.append("error")
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(v) for k, v in row.items()})
    return out.getvalue()


def _cell(value: Any) -> Any:
    return str(value).lower() if isinstance(value, bool) else value


def sweep_json(sweep: SweepDetail) -> dict[str, Any]:
    """The download: what ran (without the base scenario, which can be large) and every
    point, as `batchscope sweep --out FILE.json` writes it."""
    meta = {k: v for k, v in sweep.items() if k not in ("base", "points")}
    meta["cost_model_info"] = cost_model_info(sweep["cost_model"])
    return {**meta, "points": [r.as_dict() for r in results_of(sweep["points"])]}
