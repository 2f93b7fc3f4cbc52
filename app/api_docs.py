"""How the HTTP API describes itself (/openapi.json, /docs): the tags, the one error
body every 4xx/5xx answers with, the documented error answers of a route, and the schema
hook that adds the request bodies routes read themselves (app.deps.json_or_form)."""

from __future__ import annotations

from typing import Any, TypedDict

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field

from app.api_bodies import BODY_MODELS

REF = "#/components/schemas/{model}"
"""Where the schema's models live (pydantic's `ref_template`)."""

TAGS = [
    {"name": "control", "description": "Drive an engine (needs the control token)."},
    {"name": "live", "description": "The live session: its state, requests and knobs."},
    {"name": "sessions", "description": "Recorded sessions: list, rename, delete, re-run."},
    {"name": "scenarios", "description": "Scenario files a live session can load."},
    {"name": "engine", "description": "The local engine process: status, restart, new session."},
    {"name": "nodes", "description": "Producers pushing frames to /ws/ingest."},
    {"name": "observability", "description": "Health and Prometheus metrics."},
]


# ------------------------------------------------------------------- errors
class FieldErrorData(TypedDict):
    """A field at fault, as the error handlers build it (FieldError validates it)."""

    loc: list[str | int]
    msg: str
    type: str


class FieldError(BaseModel):
    loc: list[str | int]
    """Where: e.g. ["body", "max_tokens"] or ["query", "step"]."""
    msg: str
    type: str


class ErrorBody(BaseModel):
    """Every 4xx/5xx JSON answer: `detail` is one readable sentence (what the dashboard
    flashes); `errors` lists the fields at fault (422), empty otherwise. A route may add
    context (e.g. `rejected` on a refused injection)."""

    model_config = ConfigDict(extra="allow")
    detail: str
    errors: list[FieldError] = Field(default_factory=list)


_ERROR_TEXT = {
    400: "The body is not a JSON object or form.",
    401: "The control token is missing or wrong (Authorization: Bearer TOKEN, or the "
    "cookie the launch URL sets).",
    403: "A cross-origin request to a control action.",
    404: "No such session, request or scenario.",
    409: "The action does not fit the current state (no engine to control, a live session).",
    422: "A field is missing, of the wrong type or out of bounds.",
    503: "The engine did not answer in time.",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of a route: each code with the error body (401 with its header)."""
    out: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        entry: dict[str, Any] = {"model": ErrorBody, "description": _ERROR_TEXT[code]}
        if code == 401:
            entry["headers"] = {
                "WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}
            }
        out[code] = entry
    return out


VIEW_ERRORS = error_responses(401)
CONTROL_ERRORS = error_responses(400, 401, 403, 409, 422, 503)


def install_openapi(app: FastAPI) -> None:
    """FastAPI's schema plus the body models (routes reference them by `$ref`, through
    body_doc, since they read JSON or forms themselves)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
                tags=app.openapi_tags,
            )
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in BODY_MODELS:
                components[model.__name__] = model.model_json_schema(ref_template=REF)
            _one_error_body(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _one_error_body(schema: dict[str, Any]) -> None:
    """FastAPI documents its own 422 body where a route did not; ours answers instead."""
    error = {"$ref": "#/components/schemas/ErrorBody"}
    for operation in (op for path in schema["paths"].values() for op in path.values()):
        invalid = operation.get("responses", {}).get("422")
        if invalid is not None:
            invalid["content"] = {"application/json": {"schema": error}}
            invalid["description"] = _ERROR_TEXT[422]
    schemas = schema["components"]["schemas"]
    schemas.setdefault("ErrorBody", ErrorBody.model_json_schema(ref_template=REF))
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
