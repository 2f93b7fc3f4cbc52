"""The typed HTTP API's response bodies: what each JSON route answers (what it takes:
app.api_bodies; the errors, the tags and the schema hook: app.api_docs).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from protocol.wire import Knobs


class Message(BaseModel):
    message: str


class InjectResult(Message):
    req_ids: list[str]
    rejected: list[str] = Field(description="`id: reason` of the requests refused")


class AbortResult(Message):
    aborted: Any


class ConfigResult(Message):
    config: Knobs
    config_version: int


class WorkloadState(BaseModel):
    enabled: bool
    rate: float
    prompt_len_mean: int
    max_tokens_mean: int
    demo: bool = Field(
        False, description="the demo wave plays (the Poisson workload, off, would replace it)"
    )


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
    requested: bool = Field(False, description="stopped on request (a restart), not a crash")


class EngineProcess(BaseModel):
    """The local engine process as the supervisor sees it."""

    state: Literal["starting", "running", "restarting", "exited", "stopped"]
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
    config: Knobs
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


class SessionMeta(BaseModel):
    """protocol.wire.SessionMeta: the keys read by name; a producer may add its own."""

    model_config = ConfigDict(extra="allow")
    name: str | None = None
    source: str | None = None
    engine: str | None = None
    runner: str | None = None
    simulated: bool | None = None
    model: str | None = None
    device: str | None = None
    config: Knobs | None = None
    started_at: float | None = None
    describe: dict[str, object] | None = Field(None, description="our runner's own")
    node: str | None = None
    served_model_name: str | None = None
    rerun_of: str | None = None
    relayed: bool | None = None
    paused: bool | None = None
    vllm_version: str | None = None
    failure: dict[str, object] | None = Field(
        None, description="where the engine stopped as vLLM's would: step, assertion, detail"
    )


class ConfigMark(BaseModel):
    step: int
    changes: Knobs
    version: int


class StepSummary(BaseModel):
    """A step of the history (protocol.views.StepSummary); only the latest keep their plan."""

    step: int
    t: float
    prefill: int
    decode: int
    max_tokens: int
    seqs: int
    max_seqs: int
    running: int
    waiting: int
    kv_used: int
    kv_cached: int
    kv_total: int
    preempted: int
    updated_step: int | None
    spec: int
    accepted: int
    padding: int
    plan: dict[str, int] | None = None
    finished: list[str] | None = None
    preempted_ids: list[str] | None = None


class LeftOut(BaseModel):
    requests: int = Field(description="request rows not in `requests`")
    steps: int = Field(description="steps of history before `from_step` not in `history`")
    from_step: int = Field(description="the first step `history` holds")


class Snapshot(BaseModel):
    """A session's whole state (what a late joiner of /ws/live gets first)."""

    model_config = ConfigDict(extra="allow")
    session: str
    meta: SessionMeta
    seq: int
    step: int
    t: float
    config: Knobs
    config_version: int
    paused: bool
    simulated: bool
    config_marks: list[ConfigMark] = Field(default_factory=list)
    requests: list[dict[str, Any]]
    blocks: list[list[Any]]
    history: list[StepSummary]
    totals: dict[str, int]
    waiting_detail: dict[str, str | int | float | bool | None] = Field(
        default_factory=dict, description="the numbers behind the waiting reasons: `gate`, ..."
    )
    left_out: LeftOut | None = Field(
        None, description="what this snapshot left out (the recording has it), if anything"
    )


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
    not_modelled: list[str] = []
    """A vLLM node's knobs, `name=value`, at values other than vLLM's default that our
    engine does not model (dropped: the re-run may decide otherwise where they mattered)."""
    cost_model: str | None = None
    """Runner sim: the cost-model preset its step times came from (None: the linear one)."""
    cost_model_label: str | None = None
    """That preset's label; its source is in the new session's metadata."""


class ReleasePair(BaseModel):
    a: str = Field(description="the session run as release a")
    b: str = Field(description="the session run as release b")
    href: str = Field(description="the compare page of the two")
    message: str


class HealthCheck(BaseModel):
    ok: bool
    detail: str
    info: dict[str, Any] = Field(default_factory=dict)


class Health(BaseModel):
    status: Literal["ok", "unhealthy"]
    reason: str | None = Field(description="`check: what is wrong` of every failing check")
    checks: dict[str, HealthCheck]


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
