"""The typed HTTP API: request bodies, response bodies, the one error body, the tags and
the documented error answers of every JSON route (docs at /docs, schema at /openapi.json).

Request bodies are JSON or form data (the dashboard's htmx forms post forms); both are
validated against the same model (app.deps.json_or_form). Bounds that depend on the
server's settings (prompt length, burst size, max_model_len) are checked afterwards by
app.forms, and fail with the same error body.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field, field_validator

TAGS = [
    {"name": "control", "description": "Drive an engine (needs the control token)."},
    {"name": "live", "description": "The live session: its state, requests and knobs."},
    {"name": "sessions", "description": "Recorded sessions: list, rename, delete, re-run."},
    {"name": "scenarios", "description": "Scenario files a live session can load."},
    {"name": "nodes", "description": "Producers pushing frames to /ws/ingest."},
    {"name": "observability", "description": "Health and Prometheus metrics."},
]


# ------------------------------------------------------------------- errors
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


# ------------------------------------------------------------ request bodies
class _Body(BaseModel):
    """A form's empty field means 'not given', as in JSON leaving the key out."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value


class InjectBody(_Body):
    prompt: str | None = Field(None, description="text (tokenized by the engine's tokenizer)")
    prompt_len: int | None = Field(None, ge=1, description="random prompt of this length")
    max_tokens: int | None = Field(None, ge=1, description="default 32")
    priority: int | None = Field(None, ge=-1000, le=1000, description="lower runs first")
    shared_prefix: Literal["none", "system", "long"] | None = None
    count: int | None = Field(None, ge=1, description="a burst of N identical requests")
    temperature: float | None = Field(None, ge=0.0, le=5.0)


class LiveKnobs(_Body):
    """Knobs an engine takes while running (at least one)."""

    max_num_batched_tokens: int | None = Field(None, ge=0)
    max_num_seqs: int | None = Field(None, ge=0)
    long_prefill_token_threshold: int | None = Field(None, ge=0)
    kv_block_limit: int | None = Field(None, ge=0, description="usable KV blocks (0: all)")
    enable_chunked_prefill: bool | None = None
    scheduler_reserve_full_isl: bool | None = None
    policy: Literal["fcfs", "priority"] | None = None


class RerunBody(LiveKnobs):
    """A re-run of a recording's arrivals: any knob, the pool's size included."""

    num_gpu_blocks: int | None = Field(None, ge=0)
    block_size: int | None = Field(None, ge=0)
    max_model_len: int | None = Field(None, ge=0)
    enable_prefix_caching: bool | None = None
    runner: Literal["sim", "torch"] | None = Field(None, description="default sim")
    name: str | None = Field(None, max_length=200)


class WorkloadBody(_Body):
    enabled: bool | None = None
    rate: float | None = Field(None, ge=0.01, le=200.0, description="requests per second")
    prompt_len_mean: int | None = Field(None, ge=1, le=100_000)
    max_tokens_mean: int | None = Field(None, ge=1, le=100_000)


class RenameBody(_Body):
    name: str = Field(min_length=1, max_length=200)

    @field_validator("name")
    @classmethod
    def _stripped(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value.strip()


BODY_MODELS: tuple[type[BaseModel], ...] = (
    InjectBody,
    LiveKnobs,
    RerunBody,
    WorkloadBody,
    RenameBody,
)


def body_doc(model: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` of a route whose body is `model`, as JSON or a form."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": ref},
                "application/x-www-form-urlencoded": {"schema": ref},
            },
        }
    }


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
                components[model.__name__] = model.model_json_schema(
                    ref_template="#/components/schemas/{model}"
                )
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


REF = "#/components/schemas/{model}"


# ---------------------------------------------------------- response bodies
class Message(BaseModel):
    message: str


class InjectResult(Message):
    req_ids: list[str]
    rejected: list[str] = Field(description="`id: reason` of the requests refused")


class AbortResult(Message):
    aborted: Any


class ConfigResult(Message):
    config: dict[str, Any]
    config_version: int


class WorkloadState(BaseModel):
    enabled: bool
    rate: float
    prompt_len_mean: int
    max_tokens_mean: int


class WorkloadResult(Message):
    workload: WorkloadState


class ScenarioLoaded(Message):
    session: str


class RequestRow(BaseModel):
    """A request as the live table shows it (times in seconds; None until known)."""

    model_config = ConfigDict(extra="allow")
    req: str
    status: str
    num_prompt_tokens: int
    num_tokens: int
    num_computed_tokens: int
    num_output_tokens: int
    max_tokens: int
    priority: int
    num_preemptions: int
    prefix_hit: int
    ttft: float | None
    itl: float | None
    finish_reason: str | None
    waiting_reason: str | None


class LiveConfig(BaseModel):
    config: dict[str, Any]
    config_version: int
    workload: WorkloadState | None = Field(description="the local engine's (None: a node)")


class Quantiles(BaseModel):
    p50: float | None
    p95: float | None
    p99: float | None


class LatencySummary(BaseModel):
    ttft: Quantiles
    itl: Quantiles
    queue: Quantiles
    e2e: Quantiles
    finished: int
    throughput_tok_s: float
    preemptions: int
    kv_peak: int
    steps: int


class Snapshot(BaseModel):
    """A session's whole state (what a late joiner of /ws/live gets first)."""

    model_config = ConfigDict(extra="allow")
    session: str
    meta: dict[str, Any]
    seq: int
    step: int
    t: float
    config: dict[str, Any]
    config_version: int
    paused: bool
    simulated: bool
    requests: list[dict[str, Any]]
    blocks: list[list[Any]]
    history: list[dict[str, Any]]
    totals: dict[str, Any]


class SessionListRow(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    name: str
    source: str
    live: bool
    steps: int
    requests: int
    started_at: float


class Renamed(BaseModel):
    id: str
    name: str


class Deleted(BaseModel):
    deleted: str


class RerunResult(BaseModel):
    session: str
    name: str
    steps: int


class Comparison(BaseModel):
    a: dict[str, Any]
    b: dict[str, Any]
    diff: dict[str, Any] = Field(description="B - A of every number")


class HealthCheck(BaseModel):
    ok: bool
    detail: str
    info: dict[str, Any] = Field(default_factory=dict)


class Health(BaseModel):
    status: Literal["ok", "unhealthy"]
    reason: str | None = Field(description="`check: what is wrong` of every failing check")
    checks: dict[str, HealthCheck]
