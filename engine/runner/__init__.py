"""Model runners: turn a SchedulerOutput into sampled tokens. torch is imported lazily."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.runner.base import ModelRunner
from engine.runner.sim import SimRunner

if TYPE_CHECKING:
    from engine.config import EngineConfig

__all__ = ["ModelRunner", "SimRunner", "make_runner"]


def make_runner(kind: str, config: EngineConfig, **options: Any) -> ModelRunner:
    """`sim` (no model) or `torch` (the real paged-attention model)."""
    if kind == "sim":
        return SimRunner(**options)
    if kind == "torch":
        from engine.runner.torch_runner import TorchRunner

        return TorchRunner(config, **options)
    raise ValueError(f"unknown runner {kind!r} (choose sim or torch)")
