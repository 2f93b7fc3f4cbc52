"""batchscope's engine: a vLLM-v1 scheduler, a paged KV cache and model runners.

Pure Python; torch is imported only by the torch runner's modules (engine.runner.torch_runner
and what it imports), lazily.
"""

from engine.config import CacheConfig, ConfigError, EngineConfig, SchedulerConfig, SchedulingPolicy
from engine.engine import Engine
from engine.request import SamplingParams
from engine.scheduler import Scheduler

__all__ = [
    "CacheConfig",
    "ConfigError",
    "Engine",
    "EngineConfig",
    "SamplingParams",
    "Scheduler",
    "SchedulerConfig",
    "SchedulingPolicy",
]
