"""Commands the outside world sends into the engine thread (plain dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.request import SamplingParams


@dataclass(frozen=True, slots=True)
class AddRequest:
    req_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    priority: int = 0


@dataclass(frozen=True, slots=True)
class AddRequests:
    """A burst: applied in order in one go; the result lists each rejection (or None)."""

    items: tuple[AddRequest, ...]


@dataclass(frozen=True, slots=True)
class Abort:
    req_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class UpdateConfig:
    changes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Pause:
    pass


@dataclass(frozen=True, slots=True)
class Resume:
    pass


@dataclass(frozen=True, slots=True)
class Step:
    """While paused: run exactly `n` steps, then stay paused."""

    n: int = 1


@dataclass(frozen=True, slots=True)
class Shutdown:
    pass


Command = AddRequest | AddRequests | Abort | UpdateConfig | Pause | Resume | Step | Shutdown
