"""JSON API (and the htmx controls' endpoints): inject, abort, knobs, pause/step,
workload, scenarios, plus the JSON twins of every panel. Bodies may be JSON or form data;
with `HX-Request: true` the answer is the flash fragment instead of JSON.
"""

from __future__ import annotations

import random
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from app.forms import FormError, parse_config_changes, parse_inject, parse_workload
from app.live.engine_service import SCENARIO_DIR, EngineBusy, EngineService, list_scenario_names
from app.live.hub import EventHub
from app.nodes.control import ControlTarget, control_target
from app.security import require_control, require_view
from engine.config import ConfigError
from engine.request import SamplingParams
from engine.scenario import load_scenario

router = APIRouter(prefix="/api")
Control = [Depends(require_control)]
View = [Depends(require_view)]

SHARED_PREFIXES = {
    "system": [3 + (7 * i) % 256 for i in range(64)],
    "long": [3 + (13 * i + 5) % 256 for i in range(384)],
}


def _service(request: Request) -> EngineService:
    service: EngineService | None = request.app.state.service
    if service is None:
        raise HTTPException(409, "this dashboard runs without a local engine (--no-engine)")
    return service


def _target(request: Request) -> ControlTarget:
    """The engine to drive: ?session=ID, else the live session (local or a remote node)."""
    target = control_target(request.app.state, request.query_params.get("session"))
    if target is None:
        raise HTTPException(409, "no engine to control for this session")
    return target


def _hub(request: Request) -> EventHub:
    hub: EventHub = request.app.state.hub
    return hub


async def body_of(request: Request) -> dict[str, Any]:
    ctype = request.headers.get("content-type", "")
    try:
        if ctype.startswith("application/json"):
            data = await request.json()
        else:
            data = dict(await request.form())
    except ValueError:
        raise HTTPException(400, "the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise HTTPException(400, "the body must be a JSON object")
    return data


def _answer(
    request: Request, ok: bool, message: str, status: int, payload: dict[str, Any]
) -> Response:
    if request.headers.get("hx-request") == "true":
        from app.templating import render_flash

        # htmx swaps 2xx responses only: errors travel as 200 with an error flash.
        return HTMLResponse(render_flash(request, ok, message))
    if ok:
        return JSONResponse({"message": message, **payload}, status_code=status)
    return JSONResponse({"detail": message, **payload}, status_code=status)


def _fail(request: Request, status: int, message: str) -> Response:
    return _answer(request, False, message, status, {})


# ---------------------------------------------------------------- control
@router.post("/requests", dependencies=Control)
async def inject(request: Request) -> Response:
    service = _target(request)
    settings = request.app.state.settings
    try:
        spec = parse_inject(await body_of(request), settings)
    except FormError as exc:
        return _fail(request, 422, str(exc))
    base = service.tokenizer().encode(spec.prompt) if spec.prompt is not None else []
    prefix = SHARED_PREFIXES.get(spec.shared_prefix, [])
    ids: list[str] = []
    rejected: list[str] = []
    rng = random.Random()
    try:
        params = SamplingParams(max_tokens=spec.max_tokens, temperature=spec.temperature)
        items = [
            (
                prefix + (base or [rng.randint(3, 258) for _ in range(spec.prompt_len or 1)]),
                params,
                spec.priority,
            )
            for _ in range(spec.count)
        ]
        for req_id, reason in await service.add_requests(items):
            if reason is None:
                ids.append(req_id)
            else:
                rejected.append(f"{req_id}: {reason}")
    except EngineBusy as exc:
        return _fail(request, 503, str(exc))
    if not ids:
        return _answer(
            request, False, "rejected: " + "; ".join(rejected[:3]), 422, {"rejected": rejected}
        )
    message = f"queued {', '.join(ids[:5])}{' …' if len(ids) > 5 else ''}"
    if rejected:
        message += f" ({len(rejected)} rejected)"
    return _answer(request, True, message, 201, {"req_ids": ids, "rejected": rejected})


@router.post("/requests/{req_id}/abort", dependencies=Control)
async def abort(req_id: str, request: Request) -> Response:
    try:
        aborted = await _target(request).abort(req_id)
    except EngineBusy as exc:
        return _fail(request, 503, str(exc))
    if not aborted:
        return _fail(request, 404, f"no live request {req_id!r}")
    return _answer(request, True, f"aborted {req_id}", 200, {"aborted": aborted})


@router.post("/config", dependencies=Control)
async def update_config(request: Request) -> Response:
    service = _target(request)
    try:
        changes = parse_config_changes(await body_of(request))
        config = await service.update_config(changes)
    except FormError as exc:
        return _fail(request, 422, str(exc))
    except ConfigError as exc:
        return _fail(request, 422, f"{exc.field}: {exc.message}")
    except ValueError as exc:
        return _fail(request, 422, str(exc))
    except EngineBusy as exc:
        return _fail(request, 503, str(exc))
    state = _hub(request).live_state()
    version = state.config_version if state else 0
    summary = ", ".join(f"{k}={v}" for k, v in changes.items())
    return _answer(
        request, True, f"applied {summary}", 200, {"config": config, "config_version": version}
    )


@router.post("/pause", dependencies=Control)
async def pause(request: Request) -> Response:
    return await _simple(request, "pause", "paused")


@router.post("/resume", dependencies=Control)
async def resume(request: Request) -> Response:
    return await _simple(request, "resume", "resumed")


@router.post("/step", dependencies=Control)
async def single_step(request: Request) -> Response:
    return await _simple(request, "step", "stepped one iteration")


async def _simple(request: Request, verb: str, message: str) -> Response:
    try:
        await getattr(_target(request), verb)()
    except EngineBusy as exc:
        return _fail(request, 503, str(exc))
    except ValueError as exc:  # a remote node refused the command
        return _fail(request, 422, str(exc))
    return _answer(request, True, message, 200, {})


@router.post("/workload", dependencies=Control)
async def workload(request: Request) -> Response:
    try:
        changes = parse_workload(await body_of(request))
        spec = _service(request).set_workload(**changes)
    except FormError as exc:
        return _fail(request, 422, str(exc))
    except EngineBusy as exc:
        return _fail(request, 409, str(exc))
    state = "on" if spec.enabled else "off"
    return _answer(
        request, True, f"workload {state}, {spec.rate:g} req/s", 200, {"workload": asdict(spec)}
    )


@router.get("/scenarios", dependencies=View)
async def scenarios() -> list[dict[str, str]]:
    out = []
    for name in list_scenario_names():
        sc = load_scenario(SCENARIO_DIR / f"{name}.json")
        out.append({"name": name, "title": sc.name or name, "description": sc.description})
    return out


@router.post("/scenarios/{name}/load", dependencies=Control)
async def load(name: str, request: Request) -> Response:
    service = _service(request)
    try:
        session = service.load_scenario(name)
    except KeyError:
        return _fail(request, 404, f"no scenario named {name!r}")
    return _answer(request, True, f"loaded scenario {name}", 200, {"session": session})


# ------------------------------------------------------------- read twins
def _live(request: Request) -> Any:
    state = _hub(request).live_state()
    if state is None:
        raise HTTPException(404, "no live session")
    return state


@router.get("/state", dependencies=View)
async def state(request: Request) -> dict[str, Any]:
    snap: dict[str, Any] = _live(request).snapshot()
    return snap


@router.get("/requests", dependencies=View)
async def requests_rows(request: Request) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = _live(request).request_rows()
    return rows


@router.get("/stats", dependencies=View)
async def stats(request: Request) -> dict[str, Any]:
    summary: dict[str, Any] = _live(request).latency_summary()
    return summary


@router.get("/config", dependencies=View)
async def config(request: Request) -> dict[str, Any]:
    live = _live(request)
    service = request.app.state.service
    return {
        "config": live.config,
        "config_version": live.config_version,
        "workload": service.workload_spec() if service else None,
    }
