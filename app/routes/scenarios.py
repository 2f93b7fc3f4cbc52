"""The scenario files a live session can load (scenarios/*.json), and loading one into a
new live session of the local engine."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.api_docs import CONTROL_ERRORS, VIEW_ERRORS, error_responses
from app.api_models import ScenarioLoaded
from app.deps import Control, LocalEngineDep, View, answer
from app.errors import NotFound
from app.nodes.control import EngineBusy
from app.nodes.scenarios import ScenarioSummary, list_scenario_names, scenario_summaries

router = APIRouter(prefix="/api/scenarios", tags=["scenarios"])


@router.get("", dependencies=View, responses=VIEW_ERRORS, summary="List scenario files")
async def scenarios() -> list[ScenarioSummary]:
    return scenario_summaries()


@router.post(
    "/{name}/load",
    dependencies=Control,
    response_model=ScenarioLoaded,
    responses={**CONTROL_ERRORS, **error_responses(404)},
    summary="Load a scenario into a new live session",
)
async def load(name: str, request: Request, service: LocalEngineDep) -> Response:
    if name not in list_scenario_names():
        raise NotFound(f"no scenario named {name!r}")
    try:
        session = await service.load_scenario(name)
    except EngineBusy as exc:
        return answer(request, False, str(exc), 503)
    except ValueError as exc:
        return answer(request, False, str(exc), 422)
    return answer(request, True, f"loaded scenario {name}", 200, {"session": session})
