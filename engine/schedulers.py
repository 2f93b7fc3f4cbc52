"""The scheduler a config asks for (vLLM picks its scheduler class from its config too)."""

from __future__ import annotations

from engine.config import BatchingMode, EngineConfig
from engine.releases import ReleaseFeatures
from engine.scheduler import Scheduler
from engine.static_batching import StaticBatchingScheduler


def create_scheduler(config: EngineConfig, features: ReleaseFeatures | None = None) -> Scheduler:
    """Continuous batching (vLLM's scheduler, async or not), or static batching."""
    if config.scheduler.batching is BatchingMode.STATIC:
        return StaticBatchingScheduler(config, features)
    return Scheduler(config, features)
