"""What the routes share: FastAPI dependencies for the database, the hub, the node
registry, the local engine and the engine a control action drives; the request body of
a control action; the one way a control action answers (an htmx flash or JSON); and the
one place `NotFound` becomes a 404.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.requests import HTTPConnection
from fastapi.responses import HTMLResponse, JSONResponse, Response
from sqlalchemy.orm import Session, sessionmaker

from app.errors import NotFound
from app.live.engine_service import EngineService
from app.live.health import HealthRegistry
from app.live.hub import EventHub
from app.live.metrics import Metrics
from app.nodes.control import ControlTarget, control_target
from app.nodes.ingest import NodeRegistry
from app.records.recorder import Recorder
from app.security import require_control, require_view
from app.settings import Settings
from app.templating import render_flash, templates

View = [Depends(require_view)]
"""Route dependencies of everything a viewer may read."""
Control = [Depends(require_control)]
"""Route dependencies of every state-changing action."""


def get_settings(conn: HTTPConnection) -> Settings:
    settings: Settings = conn.app.state.settings
    return settings


def get_db(conn: HTTPConnection) -> sessionmaker[Session]:
    db: sessionmaker[Session] = conn.app.state.db
    return db


def get_hub(conn: HTTPConnection) -> EventHub:
    hub: EventHub = conn.app.state.hub
    return hub


def get_nodes(conn: HTTPConnection) -> NodeRegistry:
    nodes: NodeRegistry = conn.app.state.nodes
    return nodes


def get_recorder(conn: HTTPConnection) -> Recorder | None:
    """The recorder (None before the app's lifespan started it)."""
    recorder: Recorder | None = getattr(conn.app.state, "recorder", None)
    return recorder


def get_health(conn: HTTPConnection) -> HealthRegistry:
    health: HealthRegistry = conn.app.state.health
    return health


def get_metrics(conn: HTTPConnection) -> Metrics:
    metrics: Metrics = conn.app.state.metrics
    return metrics


def get_service(conn: HTTPConnection) -> EngineService | None:
    """The local engine, or None on a `--no-engine` dashboard."""
    service: EngineService | None = conn.app.state.service
    return service


def require_service(
    service: Annotated[EngineService | None, Depends(get_service)],
) -> EngineService:
    if service is None:
        raise HTTPException(409, "this dashboard runs without a local engine (--no-engine)")
    return service


def get_control(
    request: Request,
    hub: Annotated[EventHub, Depends(get_hub)],
    nodes: Annotated[NodeRegistry, Depends(get_nodes)],
    service: Annotated[EngineService | None, Depends(get_service)],
) -> ControlTarget:
    """The engine to drive: ?session=ID, else the live session (local or a remote node)."""
    target = control_target(hub, nodes, service, request.query_params.get("session"))
    if target is None:
        raise HTTPException(409, "no engine to control for this session")
    return target


async def get_body(request: Request) -> dict[str, Any]:
    """A control action's body: a JSON object or form data."""
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


SettingsDep = Annotated[Settings, Depends(get_settings)]
DbDep = Annotated[sessionmaker[Session], Depends(get_db)]
HubDep = Annotated[EventHub, Depends(get_hub)]
NodesDep = Annotated[NodeRegistry, Depends(get_nodes)]
RecorderDep = Annotated[Recorder | None, Depends(get_recorder)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
HealthDep = Annotated[HealthRegistry, Depends(get_health)]
ServiceDep = Annotated[EngineService | None, Depends(get_service)]
LocalEngineDep = Annotated[EngineService, Depends(require_service)]
ControlDep = Annotated[ControlTarget, Depends(get_control)]
BodyDep = Annotated[dict[str, Any], Depends(get_body)]


def answer(
    request: Request, ok: bool, message: str, status: int, payload: dict[str, Any] | None = None
) -> Response:
    """A control action's answer: with `HX-Request: true` the #flash fragment, else JSON
    (`message` on success, `detail` on failure, plus `payload`)."""
    if request.headers.get("hx-request") == "true":
        # htmx swaps 2xx responses only: errors travel as 200 with an error flash.
        return HTMLResponse(render_flash(request, ok, message))
    key = "message" if ok else "detail"
    return JSONResponse({key: message, **(payload or {})}, status_code=status)


def not_found_page(request: Request, message: str) -> Response:
    return templates.TemplateResponse(
        request, "not_found.html", {"message": message}, status_code=404
    )


async def _not_found(request: Request, exc: Exception) -> Response:
    if request.url.path.startswith("/api/"):
        return answer(request, False, str(exc), 404)
    return not_found_page(request, str(exc))


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(NotFound, _not_found)
