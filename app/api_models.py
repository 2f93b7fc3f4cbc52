"""The typed HTTP API's bodies: what each JSON route takes and answers (the errors, the
tags and the schema hook: app.api_docs; docs at /docs, schema at /openapi.json).

Request bodies are JSON or form data (the dashboard's htmx forms post forms); both are
validated against the same model (app.deps.json_or_form). Bounds that depend on the
server's settings (prompt length, burst size, max_model_len) are checked afterwards by
app.forms, and fail with the same error body.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from engine.releases import SUPPORTED, normalize_version

Release = Annotated[str, AfterValidator(normalize_version)]
"""A vLLM release the engine can decide as ('0.27', '0.27.1', 'v0.27' -> '0.27'); any
other is refused with the range (engine.releases.SUPPORTED)."""
RELEASES_TEXT = f"{SUPPORTED[0]} to {SUPPORTED[-1]}"


# ------------------------------------------------------------ request bodies
# The knobs of later releases, taken live and by a new session alike.
MaxNumActiveSeqs = Annotated[
    int | None, Field(ge=0, description="admission cap below max_num_seqs (0: off; vLLM >= 0.31)")
]
Watermark = Annotated[
    float | None,
    Field(ge=0.0, lt=1.0, description="share of the KV pool kept free (vLLM >= 0.24)"),
]
PrefillScheduleInterval = Annotated[
    int | None, Field(ge=1, description="prefill once every N steps while decoding (vLLM 0.33)")
]
ThresholdAdaptive = Annotated[
    bool | None, Field(description="floor the threshold at budget // requests (vLLM >= 0.31)")
]


class _Body(BaseModel):
    """A form's empty field means 'not given', as in JSON leaving the key out. NaN and
    Infinity are refused as such ("a finite number"), never compared with a bound."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

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
    max_num_active_seqs: MaxNumActiveSeqs = None
    watermark: Watermark = None
    prefill_schedule_interval: PrefillScheduleInterval = None
    long_prefill_token_threshold_adaptive: ThresholdAdaptive = None


class RerunBody(LiveKnobs):
    """A re-run of a recording's arrivals: any knob, the pool's size included."""

    num_gpu_blocks: int | None = Field(None, ge=0)
    block_size: int | None = Field(None, ge=0)
    max_model_len: int | None = Field(None, ge=0)
    enable_prefix_caching: bool | None = None
    runner: Literal["sim", "torch"] | None = Field(None, description="default sim")
    name: str | None = Field(None, max_length=200)
    vllm_version: Release | None = Field(
        None,
        description=f"the vLLM release to decide as, {RELEASES_TEXT} (default: the recording's)",
    )


class NewSessionBody(_Body):
    """A new live session of the local engine: its current knobs changed by these (those
    fixed while running included). Empty: the same knobs, a fresh engine."""

    max_num_batched_tokens: int | None = Field(None, ge=0)
    max_num_seqs: int | None = Field(None, ge=0)
    long_prefill_token_threshold: int | None = Field(None, ge=0)
    enable_chunked_prefill: bool | None = None
    policy: Literal["fcfs", "priority"] | None = None
    num_gpu_blocks: int | None = Field(None, ge=0)
    block_size: int | None = Field(None, ge=0)
    max_model_len: int | None = Field(None, ge=0)
    enable_prefix_caching: bool | None = None
    async_scheduling: bool | None = Field(None, description="vLLM's async scheduling")
    num_speculative_tokens: int | None = Field(
        None, ge=0, le=16, description="n-gram drafts per step (sync scheduling only)"
    )
    batching: Literal["continuous", "static"] | None = None
    vllm_version: Release | None = Field(
        None,
        description=f"the vLLM release whose scheduling the session follows, {RELEASES_TEXT}",
    )
    max_num_active_seqs: MaxNumActiveSeqs = None
    watermark: Watermark = None
    prefill_schedule_interval: PrefillScheduleInterval = None
    long_prefill_token_threshold_adaptive: ThresholdAdaptive = None


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
    NewSessionBody,
)
"""Bodies routes read themselves (json_or_form); body_doc references them by name."""


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


class EngineExitInfo(BaseModel):
    pid: int
    code: int | None = Field(description="exit status; negative: killed by that signal")
    signal: str | None
    at: float
    ran_s: float
    stderr: list[str] = Field(description="its last lines of stderr")


class EngineProcess(BaseModel):
    """The local engine process as the supervisor sees it."""

    state: Literal["starting", "running", "exited", "stopped"]
    pid: int | None
    session: str | None
    step: int | None = Field(description="the last step of its session the dashboard has")
    engine_step: int | None = Field(
        None, description="the engine's own step count, as it last reported (every second)"
    )
    dropped_frames: int = Field(
        0, description="frames of this session it dropped because the dashboard fell behind"
    )
    gaps: int = Field(0, description="holes in this session's numbering (each marked)")
    started_at: float | None
    restarts: int
    next_start_in_s: float | None = Field(description="when exited: the restart is due in")
    last_exit: EngineExitInfo | None
    last_exit_text: str | None


class RequestRow(BaseModel):
    """A request as the live table shows it (times in seconds; None until known): a
    protocol.views.RequestRow without its segments, with TTFT, ITL, output tokens, phase
    and the waiting reason's text (tests/protocol/test_wire_models.py)."""

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
    arrived_step: int | None = None
    arrived_t: float | None = None
    first_scheduled_step: int | None = None
    first_token_t: float | None = None
    last_token_t: float | None = None
    finish_t: float | None = None
    finish_step: int | None = None
    num_draft_tokens: int | None = None
    num_accepted_tokens: int | None = None
    placeholders: int | None = None
    phase: str | None = Field(None, description="prefill | decode, while running")
    e2e: float | None = Field(None, description="arrival to finish, once finished")
    waiting_text: str | None = Field(None, description="why it waits, in words")


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
    config_marks: list[dict[str, Any]] = Field(default_factory=list)
    requests: list[dict[str, Any]]
    blocks: list[list[Any]]
    history: list[dict[str, Any]]
    totals: dict[str, Any]
    waiting_detail: dict[str, Any] = Field(default_factory=dict)


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
    vllm_version: str
    """The release the re-run decided as."""
    release_chosen: str
    """Why that release: as recorded, the node's, the nearest supported one, as asked."""


class Comparison(BaseModel):
    a: dict[str, Any]
    b: dict[str, Any]
    diff: dict[str, Any] = Field(description="B - A of every number")


class ReleasePairBody(_Body):
    """One trace under two vLLM releases: a recording's arrivals re-run, or a shipped
    scenario run, once per release (sim runner), recorded as two sessions to compare."""

    session: str | None = Field(None, max_length=128, description="a recording to re-run")
    scenario: str | None = Field(None, max_length=100, description="a shipped scenario")
    a: Release = Field("0.20", description=f"the release on the left, {RELEASES_TEXT}")
    b: Release = Field("0.33", description=f"the release on the right, {RELEASES_TEXT}")


class ReleasePair(BaseModel):
    a: str = Field(description="the session run as release a")
    b: str = Field(description="the session run as release b")
    href: str = Field(description="the compare page of the two")
    message: str


class FirstDifference(BaseModel):
    a: dict[str, Any] = Field(description="session, name, vllm_version")
    b: dict[str, Any]
    step: int | None = Field(description="the first step whose plans differ; null: none")
    fields: list[str] = Field(description="what differs at that step")
    compared: int = Field(description="steps found alike before it (the walk stops at 200,000)")
    rows: dict[str, list[dict[str, Any]]] = Field(description="each side's steps around it")
    changes: list[dict[str, Any]] = Field(
        description="release changes between the two (engine.releases CHANGES), each with "
        "`explains`: reverting it alone removes the difference at that step (null: not tried)"
    )
    explained_by: list[str]
    explain_note: str = Field(description="why the changes were not tried, if they were not")


class HealthCheck(BaseModel):
    ok: bool
    detail: str
    info: dict[str, Any] = Field(default_factory=dict)


class Health(BaseModel):
    status: Literal["ok", "unhealthy"]
    reason: str | None = Field(description="`check: what is wrong` of every failing check")
    checks: dict[str, HealthCheck]


class LabSweepBody(_Body):
    """A sweep from the lab's form: a source, one or two knobs with their values. Fields
    are loosely typed on purpose: the lab's parser (app.lab.form) checks them and names
    the knob or value at fault in its 422."""

    source: str | None = Field(
        None, max_length=20, description="library|workload|session|scenario|trace"
    )
    scenario: str | None = Field(None, max_length=200, description="library scenario name")
    workload: str | None = Field(None, max_length=500, description="e.g. poisson:rate=20,n=200")
    session: str | None = Field(None, max_length=200, description="a recording's id")
    scenario_json: str | None = Field(None, max_length=2_000_000)
    trace_jsonl: str | None = Field(
        None, max_length=2_000_000, description="source trace: a Mooncake JSONL trace's text"
    )
    trace_name: str | None = Field(None, max_length=200, description="the trace's file name")
    block_tokens: str | int | None = Field(None, description="source trace: tokens per hash id")
    knob: str | None = Field(None, max_length=100, description="the knob to sweep")
    values: str | None = Field(None, max_length=2000, description="its values, e.g. 128,256")
    knob2: str | None = Field(None, max_length=100)
    values2: str | None = Field(None, max_length=2000)
    set: str | None = Field(None, max_length=2000, description="fixed knobs NAME=V; ...")
    repeat: str | int | None = Field(None, description="1..50")
    seed: str | int | None = Field(None, description="0..2^31-1")
    runner: str | None = Field(None, max_length=20, description="sim or torch")
    cost_model: str | None = Field(None, max_length=500)
    name: str | None = Field(None, max_length=200)


class LabStarted(BaseModel):
    sweep: str
    href: str
    points: int


class LabCancel(BaseModel):
    sweep: str
    cancelling: bool


class PointSession(BaseModel):
    session: str
    href: str


BODY_MODELS = (*BODY_MODELS, LabSweepBody, ReleasePairBody)
