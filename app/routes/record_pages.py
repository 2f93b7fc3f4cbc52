"""Pages over recordings and remote nodes: /sessions (list, filter, rename, delete,
pick two to compare), /compare?a=&b= (two Gantts and the summary table) and /nodes
(producers, refreshed every 2 s). Their data comes from the same functions as the JSON
twins (/api/sessions, /api/compare, /api/nodes); the templates only format it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, Response

from app.routes import sessions as sessions_api
from app.security import has_control, require_view
from app.templating import templates

router = APIRouter(dependencies=[Depends(require_view)])

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


def session_href(request: Request, session: str, live: bool) -> str:
    """Where a session opens: the live view (`/` for the current live session), else the
    replay of its recording."""
    if live:
        if session == request.app.state.hub.live_session:
            return "/"
        return "/?live=" + quote(session, safe="")
    return "/?session=" + quote(session, safe="")


def not_found(request: Request, message: str) -> Response:
    return templates.TemplateResponse(
        request, "not_found.html", {"message": message}, status_code=404
    )


async def _session_rows(request: Request, q: str | None) -> list[dict[str, Any]]:
    text = (q or "").strip()
    rows = await sessions_api.list_sessions(request, text or None)
    if text:
        # The API adds live sessions without applying the filter: apply it here too.
        needle = text.lower()
        rows = [r for r in rows if needle in f"{r['id']} {r['name']} {r['source']}".lower()]
    for row in rows:
        row["href"] = session_href(request, row["id"], bool(row.get("live")))
        row["replay_href"] = "/?session=" + quote(row["id"], safe="")
    return rows


@router.get("/sessions", response_class=HTMLResponse, include_in_schema=False)
async def sessions_page(request: Request, q: str | None = None) -> HTMLResponse:
    return templates.TemplateResponse(
        request,
        "sessions.html",
        {"rows": await _session_rows(request, q), "q": q or "", "token_ok": has_control(request)},
    )


@router.get("/panels/sessions", response_class=HTMLResponse, include_in_schema=False)
async def sessions_rows(request: Request, q: str | None = None) -> HTMLResponse:
    return templates.TemplateResponse(
        request,
        "partials/_sessions_rows.html",
        {"rows": await _session_rows(request, q), "q": q or "", "token_ok": has_control(request)},
    )


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
async def compare_page(request: Request, a: str = "", b: str = "") -> Response:
    if not a or not b:
        return not_found(request, "compare needs two sessions: /compare?a=ID&b=ID")
    try:
        result = await sessions_api.compare(a, b, request)
    except HTTPException as exc:
        return not_found(request, str(exc.detail))
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


def node_rows(request: Request) -> list[dict[str, Any]]:
    rows = []
    for view in sorted(request.app.state.nodes.views(), key=lambda v: v["node"]):
        row = dict(view)
        row["href"] = session_href(request, row["session"], row["state"] == "live")
        rows.append(row)
    return rows


@router.get("/nodes", response_class=HTMLResponse, include_in_schema=False)
async def nodes_page(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "nodes.html", {"rows": node_rows(request)})


@router.get("/panels/nodes", response_class=HTMLResponse, include_in_schema=False)
async def nodes_panel(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(
        request, "partials/_nodes_table.html", {"rows": node_rows(request)}
    )
