"""Two recordings compared: GET /api/compare?a=&b= (summaries and B - A) and its page,
/compare?a=&b= (two Gantts, the summary table with a verdict per metric, the knobs)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from app.api_docs import error_responses
from app.api_models import Comparison
from app.deps import DbDep, View, not_found_page
from app.records.compare import compare_sessions
from app.templating import templates

router = APIRouter(dependencies=View)

# (key, label, kind, direction): kind picks the formatting; direction +1 = higher is
# better, -1 = lower is better, 0 = neither.
METRICS = (
    ("throughput_tok_s", "throughput (output tok/s)", "rate", 1),
    ("ttft_p50", "TTFT p50", "ms", -1),
    ("ttft_p99", "TTFT p99", "ms", -1),
    ("itl_p50", "ITL p50", "ms", -1),
    ("itl_p99", "ITL p99", "ms", -1),
    ("e2e_p50", "E2E p50", "ms", -1),
    ("e2e_p99", "E2E p99", "ms", -1),
    ("preemptions", "preemptions", "int", -1),
    ("kv_peak", "KV peak (blocks)", "int", 0),
    ("steps", "steps", "int", -1),
    ("finished", "finished", "int", 1),
)


@router.get(
    "/api/compare",
    response_model=Comparison,
    tags=["sessions"],
    responses=error_responses(401, 404),
    summary="Compare two recordings",
)
async def compare(a: str, b: str, db: DbDep) -> dict[str, Any]:
    return await compare_sessions(db, a, b)


def compare_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for key, label, kind, direction in METRICS:
        diff = result["diff"].get(key)
        verdict = ""
        if diff and direction:
            verdict = "better" if diff * direction > 0 else "worse"
        rows.append(
            {
                "key": key,
                "label": label,
                "kind": kind,
                "a": result["a"].get(key),
                "b": result["b"].get(key),
                "diff": diff,
                "verdict": verdict,
            }
        )
    return rows


def config_rows(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    keys = sorted(set(a) | set(b))
    return [{"key": k, "a": a.get(k), "b": b.get(k), "differs": a.get(k) != b.get(k)} for k in keys]


@router.get("/compare", response_class=HTMLResponse, include_in_schema=False)
async def compare_page(request: Request, db: DbDep, a: str = "", b: str = "") -> Response:
    if not a or not b:
        return not_found_page(request, "compare needs two sessions: /compare?a=ID&b=ID")
    result = await compare_sessions(db, a, b)
    configs = config_rows(result["a"].get("config") or {}, result["b"].get("config") or {})
    return templates.TemplateResponse(
        request,
        "compare.html",
        {
            "a": result["a"],
            "b": result["b"],
            "metrics": compare_rows(result),
            "configs": configs,
            "config_diffs": sum(1 for c in configs if c["differs"]),
            "api_query": "?a=" + quote(a, safe="") + "&b=" + quote(b, safe=""),
        },
    )
