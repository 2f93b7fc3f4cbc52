"""The lab's pages: /lab (ready experiments, the sweep form, the stored sweeps) and
/lab/sweeps/ID (its chart and runs), with the htmx panels that poll while a sweep runs.
Their JSON twins are /api/lab and /api/lab/sweeps/ID (app/routes/lab_api.py)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.deps import DbDep, View
from app.lab import store
from app.lab.background import LabDep
from app.lab.views import FINISHED, list_view, overview, sweep_view
from app.security import has_control
from app.templating import templates

router = APIRouter(dependencies=View, include_in_schema=False)


def _any_running(rows: list[store.SweepRow]) -> bool:
    return any(r["status"] not in FINISHED for r in rows)


@router.get("/lab", response_class=HTMLResponse)
async def lab_page(request: Request, db: DbDep, lab: LabDep) -> HTMLResponse:
    rows = await asyncio.to_thread(store.list_sweeps, db)
    context = {
        **overview(rows, lab.status()),
        "polling": _any_running(rows),
        "token_ok": has_control(request),
    }
    return templates.TemplateResponse(request, "lab.html", context)


@router.get("/panels/lab/sweeps", response_class=HTMLResponse)
async def sweeps_rows(request: Request, db: DbDep) -> HTMLResponse:
    rows = await asyncio.to_thread(store.list_sweeps, db)
    context = {"sweeps": list_view(rows), "polling": _any_running(rows)}
    return templates.TemplateResponse(request, "partials/_lab_sweeps.html", context)


async def _sweep(request: Request, db: DbDep, sweep_id: str, template: str) -> HTMLResponse:
    view = sweep_view(await asyncio.to_thread(store.get_sweep, db, sweep_id))
    context = {"s": view, "token_ok": has_control(request)}
    return templates.TemplateResponse(request, template, context)


@router.get("/lab/sweeps/{sweep_id}", response_class=HTMLResponse)
async def sweep_page(request: Request, db: DbDep, sweep_id: str) -> HTMLResponse:
    return await _sweep(request, db, sweep_id, "lab_sweep.html")


@router.get("/panels/lab/sweeps/{sweep_id}", response_class=HTMLResponse)
async def sweep_points(request: Request, db: DbDep, sweep_id: str) -> HTMLResponse:
    """Progress and the runs table: what the sweep page swaps in while it runs."""
    return await _sweep(request, db, sweep_id, "partials/_lab_points.html")
