"""Settings: the only place that reads the environment (BATCHSCOPE_*, DATABASE_URL)."""

from __future__ import annotations

import re
import secrets
import socket
from functools import lru_cache
from typing import Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from engine.config import (
    BatchingMode,
    CacheConfig,
    EngineConfig,
    SchedulerConfig,
    SchedulingPolicy,
)
from engine.releases import DEFAULT_VLLM_VERSION
from engine.workload import WorkloadSpec


class Settings(BaseSettings):
    # NaN or Infinity are refused ("should be a finite number"), never compared to a bound.
    model_config = SettingsConfigDict(env_prefix="BATCHSCOPE_", extra="ignore", allow_inf_nan=False)

    host: str = "127.0.0.1"
    allowed_hosts: list[str] = []
    """Host names served besides loopback names, IP literals and the bind address
    (`--allowed-host`; `*` serves any, giving up the DNS-rebinding guard)."""
    port: int = Field(8000, ge=1, le=65535)
    runner: Literal["torch", "sim"] = "torch"
    model: str | None = None
    device: Literal["auto", "cpu", "cuda"] = "auto"
    workload: str = "demo"
    """The live engine's own arrivals: `demo` (a scripted wave on repeat that shows chunked
    prefill, waiting and preemption: engine.demo_workload), `poisson`, `none`, or
    `trace:FILE` (a Mooncake-style JSONL trace, played at its timestamps from the start
    of each session)."""
    trace_block_tokens: int = Field(512, ge=1, le=1 << 20)
    """Tokens per hash id block of a `trace:FILE` workload."""
    engine: bool = True
    """False: a pure observer dashboard with no local engine (remote nodes push frames)."""
    database_url: str = Field(
        "sqlite:///./data/batchscope.db",
        validation_alias=AliasChoices("DATABASE_URL", "BATCHSCOPE_DATABASE_URL"),
    )
    token: str = Field(default_factory=lambda: secrets.token_urlsafe(18))
    view_open: bool = True
    """Viewing without the token is allowed on loopback binds."""

    # Default engine knobs for the live demo.
    max_num_batched_tokens: int = 256
    max_num_seqs: int = 16
    max_model_len: int = 1024
    long_prefill_token_threshold: int = 0
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    policy: Literal["fcfs", "priority"] = "fcfs"
    block_size: int = 16
    num_gpu_blocks: int = 257
    async_scheduling: bool = False
    """vLLM's async scheduling (batch queue of 2) for the local engine's sessions."""
    num_speculative_tokens: int = Field(0, ge=0, le=16)
    batching: Literal["continuous", "static"] = "continuous"
    vllm_version: str = DEFAULT_VLLM_VERSION
    """The vLLM release the local engine decides as (docs/vllm_releases.md)."""

    # Default Poisson workload.
    workload_rate: float = Field(2.0, gt=0, le=200)
    workload_prompt_len_mean: int = Field(96, ge=1)
    workload_max_tokens_mean: int = Field(48, ge=1)

    relay: Literal["auto", "on", "off"] = "auto"
    """Fan live frames out to other dashboard processes via PostgreSQL LISTEN/NOTIFY
    (auto: on when DATABASE_URL is PostgreSQL)."""
    realtime: bool = True
    """Wait out a simulated runner's modelled step time (False: run the sim flat out)."""
    sim_speed: float = Field(1.0, gt=0, le=1000)
    """With realtime: play simulated time this many times faster than the model."""
    health_recorder_max_lag_s: float = Field(30.0, gt=0)
    """/healthz says unhealthy once a frame has waited this long for the database."""
    ws_queue_frames: int = Field(512, ge=8, le=100_000)
    """Per-client bound on queued frames; past it the client gets a gap + snapshot."""
    ws_stale_after_s: float = Field(1.0, gt=0, le=600)
    """A frame queued for a client this long, or one send to it that blocked this long:
    the client fell behind (gap + snapshot)."""
    ws_ping_interval_s: float = Field(20.0, gt=0, le=3600)
    """Each websocket client is pinged this often; one whose pong takes longer than this
    is gone and is closed (1011). A browser answers pings from its network stack, even
    while its page is too busy to read frames."""
    node_gone_after_s: float = Field(300.0, gt=0, le=86_400)
    """A node disconnected this long has vanished: its session is ended (`vanished`);
    one that comes back later resumes it."""

    bus: str | None = Field(None, pattern=r"^nats://\S+$")
    """A NATS JetStream URL (`nats://HOST:PORT`): nodes publish to it and this dashboard
    consumes the fleet from it (app/bus); unset, ingest is the direct websocket."""
    bus_consumer: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]{1,64}$")
    """This dashboard's durable consumer name on the bus (default: host-port); a
    restarted dashboard with the same name resumes where it acked."""
    bus_max_age_s: float = Field(3600.0, gt=0)
    bus_max_mb: float = Field(1024.0, gt=0)
    """Retention limits of the bus's frames stream (age and size)."""
    bus_node: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]{1,100}$")
    """The name this dashboard's own engine has on the bus (default: the consumer name):
    with --bus it publishes its per-step summaries there, a node on /fleet like any other."""

    max_recordings_mb: float = Field(0, ge=0)
    """Cap on what recordings store: past it the oldest ended sessions are deleted
    (0: no cap). `batchscope sessions prune` does the same on demand."""

    # Input limits.
    max_prompt_chars: int = 16_384
    max_burst: int = 256

    def engine_config(self) -> EngineConfig:
        return EngineConfig(
            scheduler=SchedulerConfig(
                max_num_batched_tokens=self.max_num_batched_tokens,
                max_num_seqs=self.max_num_seqs,
                max_model_len=self.max_model_len,
                long_prefill_token_threshold=self.long_prefill_token_threshold,
                enable_chunked_prefill=self.enable_chunked_prefill,
                policy=SchedulingPolicy(self.policy),
                async_scheduling=self.async_scheduling,
                num_speculative_tokens=self.num_speculative_tokens,
                batching=BatchingMode(self.batching),
            ),
            cache=CacheConfig(
                block_size=self.block_size,
                num_gpu_blocks=self.num_gpu_blocks,
                enable_prefix_caching=self.enable_prefix_caching,
            ),
            vllm_version=self.vllm_version,
        ).validate()

    @field_validator("workload")
    @classmethod
    def _check_workload(cls, value: str) -> str:
        if value in ("demo", "poisson", "none") or (
            value.startswith("trace:") and value[6:].strip()
        ):
            return value
        raise ValueError("demo, poisson, none or trace:FILE (a Mooncake JSONL trace)")

    def bus_name(self) -> str:
        """This dashboard's durable consumer name on the bus: `bus_consumer`, else
        `<host>-<port>` made subject-safe."""
        if self.bus_consumer:
            return self.bus_consumer
        return re.sub(r"[^A-Za-z0-9_-]", "_", f"{socket.gethostname()}-{self.port}")[:100]

    def bus_node_name(self) -> str:
        """The name of this dashboard's own engine on the bus."""
        return self.bus_node or self.bus_name()

    def workload_trace(self) -> str | None:
        """The trace file of `--workload trace:FILE`, else None."""
        return self.workload[6:] if self.workload.startswith("trace:") else None

    def workload_spec(self) -> WorkloadSpec:
        """The Poisson workload a live engine starts with (local or pushing)."""
        return WorkloadSpec(
            enabled=self.workload == "poisson",
            rate=self.workload_rate,
            prompt_len_mean=self.workload_prompt_len_mean,
            max_tokens_mean=self.workload_max_tokens_mean,
        )

    @property
    def is_loopback(self) -> bool:
        return self.host in ("127.0.0.1", "localhost", "::1")


@lru_cache
def get_settings() -> Settings:
    return Settings()
