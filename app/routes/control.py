"""Control of the engine behind a session (?session=ID, else the live one; local or a
remote node): inject requests, abort one, change knobs, pause/resume/step, and the local
engine's Poisson workload. Bodies may be JSON or form data; with `HX-Request: true` the
answer is the flash fragment instead of JSON (app.deps.answer).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from app.api_bodies import InjectBody, LiveKnobs, WorkloadBody, body_doc
from app.api_docs import CONTROL_ERRORS, error_responses
from app.api_models import AbortResult, ConfigResult, InjectResult, Message, WorkloadResult
from app.deps import (
    Control,
    ControlDep,
    ControlSessionDep,
    HubDep,
    LocalControlDep,
    SettingsDep,
    answer,
    json_or_form,
)
from app.errors import NotFound
from app.forms import parse_config_changes, parse_inject, parse_workload
from app.nodes.control import EngineBusy, NewRequest
from engine.config import ConfigError
from engine.request import SamplingParams

router = APIRouter(prefix="/api", dependencies=Control, tags=["control"], responses=CONTROL_ERRORS)
InjectDep = Annotated[InjectBody, Depends(json_or_form(InjectBody))]
KnobsDep = Annotated[LiveKnobs, Depends(json_or_form(LiveKnobs))]
WorkloadDep = Annotated[WorkloadBody, Depends(json_or_form(WorkloadBody))]

SHARED_PREFIXES = {
    "system": [3 + (7 * i) % 256 for i in range(64)],
    "long": [3 + (13 * i + 5) % 256 for i in range(384)],
}


@router.post(
    "/requests",
    status_code=201,
    response_model=InjectResult,
    openapi_extra=body_doc(InjectBody),
    summary="Inject requests",
)
async def inject(
    request: Request,
    target: ControlDep,
    session: ControlSessionDep,
    hub: HubDep,
    settings: SettingsDep,
    body: InjectDep,
) -> Response:
    """Queue `count` requests: `prompt` text, or a random prompt of `prompt_len` tokens,
    after an optional shared prefix, validated against the target engine's knobs. 422
    when every one is refused (`rejected` says why)."""
    state = hub.live_state(session)
    limit = state.config.get("max_model_len") if state is not None else None
    spec = parse_inject(
        body.model_dump(exclude_none=True), settings, limit if isinstance(limit, int) else None
    )
    base = target.tokenizer().encode(spec.prompt) if spec.prompt is not None else []
    prefix = SHARED_PREFIXES.get(spec.shared_prefix, [])
    ids: list[str] = []
    rejected: list[str] = []
    rng = random.Random()
    try:
        params = SamplingParams(max_tokens=spec.max_tokens, temperature=spec.temperature)
        items = [
            NewRequest(
                prefix + (base or [rng.randint(3, 258) for _ in range(spec.prompt_len or 1)]),
                params,
                spec.priority,
            )
            for _ in range(spec.count)
        ]
        for req_id, reason in await target.add_requests(items):
            if reason is None:
                ids.append(req_id)
            else:
                rejected.append(f"{req_id}: {reason}")
    except EngineBusy as exc:
        return answer(request, False, str(exc), 503)
    if not ids:
        message = "rejected: " + "; ".join(rejected[:3])
        return answer(request, False, message, 422, {"rejected": rejected})
    message = f"queued {', '.join(ids[:5])}{' …' if len(ids) > 5 else ''}"
    if rejected:
        message += f" ({len(rejected)} rejected)"
    return answer(request, True, message, 201, {"req_ids": ids, "rejected": rejected})


@router.post(
    "/requests/{req_id}/abort",
    response_model=AbortResult,
    responses=error_responses(404),
    summary="Abort a request",
)
async def abort(req_id: str, request: Request, target: ControlDep) -> Response:
    try:
        aborted = await target.abort(req_id)
    except EngineBusy as exc:
        return answer(request, False, str(exc), 503)
    if not aborted:
        raise NotFound(f"no live request {req_id!r}")
    return answer(request, True, f"aborted {req_id}", 200, {"aborted": aborted})


@router.post(
    "/config",
    response_model=ConfigResult,
    openapi_extra=body_doc(LiveKnobs),
    summary="Change live knobs",
)
async def update_config(
    request: Request, target: ControlDep, session: ControlSessionDep, hub: HubDep, body: KnobsDep
) -> Response:
    """Apply the knobs given (at least one) from the engine's next step."""
    changes = parse_config_changes(body.model_dump(exclude_none=True))
    try:
        config = await target.update_config(changes)
    except ConfigError as exc:
        return answer(request, False, f"{exc.field}: {exc.message}", 422)
    except ValueError as exc:
        return answer(request, False, str(exc), 422)
    except EngineBusy as exc:
        return answer(request, False, str(exc), 503)
    state = hub.live_state(session)
    version = state.config_version if state else 0
    summary = ", ".join(f"{k}={v}" for k, v in changes.items())
    payload = {"config": config, "config_version": version}
    return answer(request, True, f"applied {summary}", 200, payload)


@router.post("/pause", response_model=Message, summary="Pause the engine")
async def pause(request: Request, target: ControlDep) -> Response:
    return await _run(request, target.pause, "paused")


@router.post("/resume", response_model=Message, summary="Resume the engine")
async def resume(request: Request, target: ControlDep) -> Response:
    return await _run(request, target.resume, "resumed")


@router.post("/step", response_model=Message, summary="Run exactly one step (pauses first)")
async def single_step(request: Request, target: ControlDep) -> Response:
    return await _run(request, target.step, "stepped one iteration")


async def _run(request: Request, action: Callable[[], Awaitable[None]], message: str) -> Response:
    try:
        await action()
    except EngineBusy as exc:
        return answer(request, False, str(exc), 503)
    except ValueError as exc:  # a remote node refused the command
        return answer(request, False, str(exc), 422)
    return answer(request, True, message, 200)


@router.post(
    "/workload",
    response_model=WorkloadResult,
    openapi_extra=body_doc(WorkloadBody),
    summary="Set the local engine's Poisson workload",
)
async def workload(request: Request, service: LocalControlDep, body: WorkloadDep) -> Response:
    changes = parse_workload(body.model_dump(exclude_none=True))
    try:
        spec = await service.set_workload(**changes)
    except EngineBusy as exc:
        return answer(request, False, str(exc), 503)
    except ValueError as exc:  # the live session runs a scenario
        return answer(request, False, str(exc), 409)
    state = "on" if spec["enabled"] else "off"
    message = f"workload {state}, {spec['rate']:g} req/s"
    return answer(request, True, message, 200, {"workload": spec})
