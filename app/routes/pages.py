"""The dashboard page and its htmx panels (request table, latency summary).

Routes build plain data (from the live SessionState, the same data as the /api twins)
and the templates only format it (STYLE R8).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from app.engine_service import SCENARIO_DIR, list_scenario_names
from app.security import has_control, require_view
from app.templating import templates
from engine.scenario import ScenarioError, load_scenario

router = APIRouter(dependencies=[Depends(require_view)])

MAX_TABLE_ROWS = 150
ACTIVE = {"RUNNING": 0, "PREEMPTED": 1, "WAITING": 2}
KNOBS = (
    "max_num_batched_tokens",
    "max_num_seqs",
    "long_prefill_token_threshold",
    "enable_chunked_prefill",
    "scheduler_reserve_full_isl",
    "kv_block_limit",
    "policy",
)


def _state(request: Request) -> Any:
    return request.app.state.hub.live_state()


def _snapshot(request: Request) -> dict[str, Any]:
    state = _state(request)
    if state is None:
        return {
            "session": None,
            "step": -1,
            "config": {},
            "requests": [],
            "history": [],
            "paused": False,
            "simulated": False,
            "meta": {},
            "totals": {},
        }
    snap: dict[str, Any] = state.snapshot()
    return snap


def scenario_list() -> list[dict[str, str]]:
    out = []
    for name in list_scenario_names():
        try:
            sc = load_scenario(SCENARIO_DIR / f"{name}.json")
        except (ScenarioError, OSError):
            continue
        out.append({"name": name, "title": sc.name or name, "description": sc.description})
    return out


def request_rows(snap: dict[str, Any], limit: int = MAX_TABLE_ROWS) -> list[dict[str, Any]]:
    """Live requests first (running, preempted, waiting), then the latest finished ones;
    each with TTFT and mean ITL in seconds (None until known)."""
    t_of = {h["step"]: h["t"] for h in snap.get("history", [])}
    now = snap.get("t", 0.0)
    rows = []
    for i, r in enumerate(snap.get("requests", [])):
        row = dict(r)
        arrived, first = r.get("arrived_t"), r.get("first_token_t")
        row["ttft"] = first - arrived if first is not None and arrived is not None else None
        outputs = max(0, r.get("num_tokens", 0) - r.get("num_prompt_tokens", 0))
        row["num_output_tokens"] = outputs
        end = t_of.get(r["finish_step"]) if r.get("finish_step") is not None else now
        if first is not None and end is not None and outputs > 1:
            row["itl"] = max(0.0, end - first) / (outputs - 1)
        else:
            row["itl"] = None
        row["_order"] = (ACTIVE.get(r.get("status", ""), 3), -i)
        rows.append(row)
    rows.sort(key=lambda x: x["_order"])
    return rows[:limit]


def _counts(snap: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {"total": 0}
    for r in snap.get("requests", []):
        status = r.get("status", "WAITING")
        counts[status] = counts.get(status, 0) + 1
        counts["total"] += 1
    return counts


def _summary(request: Request) -> dict[str, Any] | None:
    state = _state(request)
    if state is None:
        return None
    summary: dict[str, Any] = state.latency_summary()
    return summary


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def dashboard(request: Request) -> HTMLResponse:
    snap = _snapshot(request)
    service = request.app.state.service
    return templates.TemplateResponse(
        request,
        "dashboard.html",
        {
            "snapshot": snap,
            "config": {k: snap.get("config", {}).get(k) for k in KNOBS},
            "scenarios": scenario_list(),
            "token_ok": has_control(request),
            "workload": service.workload_spec() if service is not None else None,
            "rows": request_rows(snap),
            "counts": _counts(snap),
            "summary": _summary(request),
        },
    )


@router.get("/panels/requests", response_class=HTMLResponse, include_in_schema=False)
async def requests_panel(request: Request) -> HTMLResponse:
    snap = _snapshot(request)
    return templates.TemplateResponse(
        request,
        "partials/_request_table.html",
        {
            "rows": request_rows(snap),
            "counts": _counts(snap),
            "token_ok": has_control(request),
        },
    )


@router.get("/panels/controls", response_class=HTMLResponse, include_in_schema=False)
async def controls_panel(request: Request) -> HTMLResponse:
    """Re-rendered when the live session changes (a scenario has no Poisson workload)."""
    service = request.app.state.service
    return templates.TemplateResponse(
        request,
        "partials/_controls.html",
        {
            "token_ok": has_control(request),
            "workload": service.workload_spec() if service is not None else None,
        },
    )


@router.get("/panels/stats", response_class=HTMLResponse, include_in_schema=False)
async def stats_panel(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(
        request, "partials/_stats.html", {"summary": _summary(request)}
    )
