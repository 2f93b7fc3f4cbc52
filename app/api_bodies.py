"""The typed HTTP API's request bodies: what each JSON route takes (what it answers:
app.api_shapes and app.api_models; the errors, the tags and the schema hook:
app.api_docs; docs at /docs, schema at /openapi.json).

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
CacheAwareWindow = Annotated[
    int | None,
    Field(ge=0, description="cache-aware admission look-ahead window (0: off; vLLM >= 0.34)"),
]
CacheAwareThreshold = Annotated[
    float | None,
    Field(ge=0.0, le=1.0, description="KV usage from which the window applies (vLLM >= 0.34)"),
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
    cache_aware_admission_window: CacheAwareWindow = None
    cache_aware_admission_threshold: CacheAwareThreshold = None


class RerunBody(LiveKnobs):
    """A re-run of a recording's arrivals: any knob, the pool's size included."""

    num_gpu_blocks: int | None = Field(None, ge=0)
    block_size: int | None = Field(None, ge=0)
    max_model_len: int | None = Field(None, ge=0)
    enable_prefix_caching: bool | None = None
    runner: Literal["recorded", "sim", "torch"] | None = Field(
        None,
        description="recorded (default): simulated on the recording's own clock, so no "
        "change reproduces it; sim: the cost model's clock; torch: the model really runs "
        "(wall-clock step times: it differs from the recording)",
    )
    cost_model: str | None = Field(
        None,
        max_length=100,
        description="runner sim: a cost-model preset (GET /api/lab lists them with their "
        "labels and sources), e.g. h100x2-fp8:llama-3.1-70b; default: the linear model",
    )
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
    cache_aware_admission_window: CacheAwareWindow = None
    cache_aware_admission_threshold: CacheAwareThreshold = None


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


class ReleasePairBody(_Body):
    """One trace under two vLLM releases: a recording's arrivals re-run, or a shipped
    scenario run, once per release (sim runner), recorded as two sessions to compare."""

    session: str | None = Field(None, max_length=128, description="a recording to re-run")
    scenario: str | None = Field(None, max_length=100, description="a shipped scenario")
    a: Release = Field("0.20", description=f"the release on the left, {RELEASES_TEXT}")
    b: Release = Field("0.33", description=f"the release on the right, {RELEASES_TEXT}")


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


BODY_MODELS: tuple[type[BaseModel], ...] = (
    InjectBody,
    LiveKnobs,
    RerunBody,
    WorkloadBody,
    RenameBody,
    NewSessionBody,
    LabSweepBody,
    ReleasePairBody,
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
