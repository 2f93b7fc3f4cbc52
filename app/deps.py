"""What the routes share: FastAPI dependencies for the database, the hub, the node
registry, the local engine and the engine a control action drives; the request body of
a control action; the one way a control action answers (an htmx flash or JSON); and the
one place `NotFound` becomes a 404.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, TypeVar

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.requests import HTTPConnection
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ValidationError
from sqlalchemy.orm import Session, sessionmaker
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.api_docs import ErrorBody, FieldError, FieldErrorData
from app.bus.fleet import FleetView
from app.bus.intake import BusIntake
from app.errors import NotFound
from app.forms import Form, FormError
from app.live.health import HealthRegistry
from app.live.hub import EventHub
from app.live.metrics import Metrics
from app.nodes.control import ControlTarget, NoControl, control_session, control_target
from app.nodes.ingest import NodeRegistry
from app.nodes.local_engine import LocalEngine
from app.records.recorder import Recorder
from app.security import require_control, require_view
from app.settings import Settings
from app.templating import render_flash, templates

M = TypeVar("M", bound=BaseModel)

View = [Depends(require_view)]
"""Route dependencies of everything a viewer may read."""
Control = [Depends(require_control)]
"""Route dependencies of every state-changing action."""


async def get_settings(conn: HTTPConnection) -> Settings:
    settings: Settings = conn.app.state.settings
    return settings


async def get_db(conn: HTTPConnection) -> sessionmaker[Session]:
    db: sessionmaker[Session] = conn.app.state.db
    return db


async def get_hub(conn: HTTPConnection) -> EventHub:
    hub: EventHub = conn.app.state.hub
    return hub


async def get_nodes(conn: HTTPConnection) -> NodeRegistry:
    nodes: NodeRegistry = conn.app.state.nodes
    return nodes


async def get_fleet(conn: HTTPConnection) -> FleetView:
    fleet: FleetView = conn.app.state.fleet
    return fleet


async def get_bus(conn: HTTPConnection) -> BusIntake | None:
    """The fleet bus consumer (None without --bus)."""
    bus: BusIntake | None = getattr(conn.app.state, "bus", None)
    return bus


async def get_recorder(conn: HTTPConnection) -> Recorder | None:
    """The recorder (None before the app's lifespan started it)."""
    recorder: Recorder | None = getattr(conn.app.state, "recorder", None)
    return recorder


async def get_recorded_db(conn: HTTPConnection) -> sessionmaker[Session]:
    """The database, once the recorder has written what it still holds: a read of the
    recording (an export, a state, a re-run's arrivals) then sees a live or just-ended
    session as far as the live view has shown it."""
    recorder = await get_recorder(conn)
    if recorder is not None:
        await recorder.flush()
    return await get_db(conn)


async def get_health(conn: HTTPConnection) -> HealthRegistry:
    health: HealthRegistry = conn.app.state.health
    return health


async def get_metrics(conn: HTTPConnection) -> Metrics:
    metrics: Metrics = conn.app.state.metrics
    return metrics


async def get_service(conn: HTTPConnection) -> LocalEngine | None:
    """The local engine (process), or None on a `--no-engine` dashboard."""
    service: LocalEngine | None = conn.app.state.local_engine
    return service


async def require_service(
    service: Annotated[LocalEngine | None, Depends(get_service)],
) -> LocalEngine:
    if service is None:
        raise HTTPException(409, "this dashboard runs without a local engine (--no-engine)")
    return service


async def get_control_session(
    request: Request,
    hub: Annotated[EventHub, Depends(get_hub)],
    service: Annotated[LocalEngine | None, Depends(get_service)],
) -> str | None:
    """The session a control action aims at: ?session=ID, else the live one."""
    return control_session(hub, service, request.query_params.get("session"))


async def get_control(
    hub: Annotated[EventHub, Depends(get_hub)],
    nodes: Annotated[NodeRegistry, Depends(get_nodes)],
    service: Annotated[LocalEngine | None, Depends(get_service)],
    session: Annotated[str | None, Depends(get_control_session)],
) -> ControlTarget:
    """The engine to drive: that session's producer (local or a remote node); a 409 with
    the reason when it cannot be driven (read-only, ended, a recording)."""
    try:
        return control_target(hub, nodes, service, session)
    except NoControl as exc:
        raise HTTPException(409, str(exc)) from None


async def require_local_control(
    service: Annotated[LocalEngine, Depends(require_service)],
    session: Annotated[str | None, Depends(get_control_session)],
) -> LocalEngine:
    """The local engine, for an action only it has (its workload): a 409 when the action
    aims at another producer's session."""
    if session is not None and session != service.session:
        raise HTTPException(
            409, f"session {session!r} is not the local engine's: it has no local workload"
        )
    return service


async def get_body(request: Request) -> Form:
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
RecordedDbDep = Annotated[sessionmaker[Session], Depends(get_recorded_db)]
HubDep = Annotated[EventHub, Depends(get_hub)]
NodesDep = Annotated[NodeRegistry, Depends(get_nodes)]
FleetDep = Annotated[FleetView, Depends(get_fleet)]
BusDep = Annotated[BusIntake | None, Depends(get_bus)]
RecorderDep = Annotated[Recorder | None, Depends(get_recorder)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
HealthDep = Annotated[HealthRegistry, Depends(get_health)]
ServiceDep = Annotated[LocalEngine | None, Depends(get_service)]
LocalEngineDep = Annotated[LocalEngine, Depends(require_service)]
ControlDep = Annotated[ControlTarget, Depends(get_control)]
ControlSessionDep = Annotated[str | None, Depends(get_control_session)]
LocalControlDep = Annotated[LocalEngine, Depends(require_local_control)]
BodyDep = Annotated[Form, Depends(get_body)]


def json_or_form(model: type[M]) -> Callable[[Request], Awaitable[M]]:
    """A dependency: the body (JSON object or form) validated against `model`; a field at
    fault is a 422 like any other (RequestValidationError, the one error body)."""

    async def parse(request: Request) -> M:
        data = await get_body(request)
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
            raise RequestValidationError(errors, body=data) from None

    return parse


def answer(
    request: Request,
    ok: bool,
    message: str,
    status: int,
    payload: Mapping[str, object] | None = None,
) -> Response:
    """A control action's answer: with `HX-Request: true` the #flash fragment, else JSON
    (`message` and `payload` on success; the error body, plus `payload`, on failure)."""
    if request.headers.get("hx-request") == "true":
        # htmx swaps 2xx responses only: errors travel as 200 with an error flash.
        return HTMLResponse(render_flash(request, ok, message))
    if ok:
        return JSONResponse({"message": message, **(payload or {})}, status_code=status)
    return error_response(request, status, message, extra=payload)


def error_response(
    request: Request,
    status: int,
    detail: str,
    errors: list[FieldErrorData] | None = None,
    headers: Mapping[str, str] | None = None,
    extra: Mapping[str, object] | None = None,
) -> Response:
    """Every error answer (app.api_docs.ErrorBody); an htmx action gets the flash (an
    htmx GET keeps the status, so its panel is not swapped for an error)."""
    if request.headers.get("hx-request") == "true" and request.method != "GET":
        return HTMLResponse(render_flash(request, False, detail), headers=headers)
    body = ErrorBody(detail=detail, errors=[FieldError(**e) for e in errors or []])
    content = {**(extra or {}), **body.model_dump(mode="json")}
    return JSONResponse(content, status_code=status, headers=headers)


def not_found_page(request: Request, message: str) -> Response:
    return templates.TemplateResponse(
        request, "not_found.html", {"message": message}, status_code=404
    )


async def _not_found(request: Request, exc: Exception) -> Response:
    if request.url.path.startswith("/api/"):
        return error_response(request, 404, str(exc))
    return not_found_page(request, str(exc))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    return error_response(request, exc.status_code, str(exc.detail), headers=exc.headers)


async def _invalid(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors: list[FieldErrorData] = [
        {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": e.get("type", "")}
        for e in exc.errors()
    ]
    return error_response(request, 422, _summary(errors), errors)


async def _form_error(request: Request, exc: Exception) -> Response:
    """app.forms' messages start with the field: `max_tokens: must be between 1 and 1024`."""
    field, sep, msg = str(exc).partition(": ")
    loc: list[str | int] = ["body", field] if sep and " " not in field else ["body"]
    error: FieldErrorData = {"loc": loc, "msg": msg if sep else str(exc), "type": "value_error"}
    return error_response(request, 422, str(exc), [error])


def _summary(errors: list[FieldErrorData]) -> str:
    """`field: message; ...`, the sentence a person reads."""
    parts = []
    for e in errors:
        where = [str(p) for p in e["loc"] if p not in ("body", "query", "path")]
        parts.append(f"{'.'.join(where)}: {e['msg']}" if where else e["msg"])
    return "; ".join(parts) or "invalid request"


def install_error_handlers(app: FastAPI) -> None:
    """One error body for every 4xx/5xx a route answers (app.api_docs.ErrorBody)."""
    app.add_exception_handler(NotFound, _not_found)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(FormError, _form_error)
