"""The local engine process: how it is (running, or how it last exited: code, signal, its
last stderr lines), restarting it, and starting a new live session in it under other knobs
(the engine loop's included: async scheduling, speculative decoding, static batching)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from app.api_bodies import NewSessionBody, body_doc
from app.api_docs import CONTROL_ERRORS, error_responses
from app.api_models import EngineProcess, ScenarioLoaded
from app.deps import Control, LocalEngineDep, View, answer, json_or_form
from app.forms import parse_session_changes
from app.nodes.control import EngineBusy

router = APIRouter(prefix="/api/engine", tags=["engine"])
NewSessionDep = Annotated[NewSessionBody, Depends(json_or_form(NewSessionBody))]


@router.get(
    "",
    dependencies=View,
    response_model=EngineProcess,
    responses=error_responses(401, 409),
    summary="The local engine process",
)
async def engine_status(local: LocalEngineDep) -> dict[str, Any]:
    """`state` is starting, running, exited (a restart with backoff is due) or stopped;
    `last_exit` says how the previous process ended."""
    return local.status()


@router.post(
    "/restart",
    dependencies=Control,
    response_model=ScenarioLoaded,
    responses=CONTROL_ERRORS,
    summary="Restart the local engine process (a new session)",
)
async def restart(request: Request, local: LocalEngineDep) -> Response:
    try:
        session = await local.restart()
    except EngineBusy as exc:
        return answer(request, False, str(exc), 503)
    return answer(request, True, f"engine restarted: session {session}", 200, {"session": session})


@router.post(
    "/session",
    dependencies=Control,
    response_model=ScenarioLoaded,
    responses=CONTROL_ERRORS,
    openapi_extra=body_doc(NewSessionBody),
    summary="Start a new live session with other knobs",
)
async def new_session(request: Request, local: LocalEngineDep, body: NewSessionDep) -> Response:
    """The current knobs changed by the body's, including those fixed while a session runs
    (pool size, async_scheduling, num_speculative_tokens, batching)."""
    changes = parse_session_changes(body.model_dump(exclude_none=True))
    try:
        session = await local.new_session(changes)
    except EngineBusy as exc:
        return answer(request, False, str(exc), 503)
    except ValueError as exc:  # the engine refused a knob
        return answer(request, False, str(exc), 422)
    summary = ", ".join(f"{k}={v}" for k, v in changes.items()) or "same knobs"
    return answer(request, True, f"new session {session} ({summary})", 200, {"session": session})
