"""The typed HTTP API's response bodies that no TypedDict of the code already is: what
each such JSON route answers (the shapes the code builds are answered as they are:
app.api_shapes; what a route takes: app.api_bodies; the errors, the tags and the schema
hook: app.api_docs).
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


class LiveConfig(BaseModel):
    config: Knobs
    config_version: int
    workload: WorkloadState | None = Field(description="the local engine's (None: a node)")


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
