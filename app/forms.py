"""Parse and bound user input for the control endpoints (JSON or form data).

Every error names the field; nothing here trusts the browser.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from typing_extensions import TypedDict

from app.settings import Settings
from protocol.wire import Knobs

INT_KNOBS = (
    "max_num_batched_tokens",
    "max_num_seqs",
    "long_prefill_token_threshold",
    "kv_block_limit",
    # knobs of later vLLM releases: the engine refuses them on a release without them
    "max_num_active_seqs",
    "prefill_schedule_interval",
    "cache_aware_admission_window",
)
BOOL_KNOBS = (
    "enable_chunked_prefill",
    "scheduler_reserve_full_isl",
    "long_prefill_token_threshold_adaptive",
)
FLOAT_KNOBS = ("watermark", "cache_aware_admission_threshold")
KNOB_MAX = 1 << 20


Form = Mapping[str, object]
"""A body as posted (JSON object or form data): nothing in it is trusted until parsed here."""


class FormError(ValueError):
    pass


class WorkloadChanges(TypedDict, total=False):
    """The local engine's Poisson workload, as changed by POST /api/workload."""

    enabled: bool
    rate: float
    prompt_len_mean: int
    max_tokens_mean: int


@dataclass(frozen=True, slots=True)
class InjectSpec:
    prompt: str | None
    prompt_len: int | None
    max_tokens: int
    priority: int
    shared_prefix: str
    count: int
    temperature: float


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and value.strip() == "")


def as_int(data: Form, key: str, low: int, high: int, default: int | None = None) -> int:
    value = data.get(key)
    if _blank(value):
        if default is None:
            raise FormError(f"{key}: required")
        return default
    if isinstance(value, bool):
        raise FormError(f"{key}: must be an integer")
    try:
        number = value if isinstance(value, int) else int(str(value).strip())
    except ValueError:
        raise FormError(f"{key}: must be an integer") from None
    if not low <= number <= high:
        raise FormError(f"{key}: must be between {low} and {high}")
    return number


def as_float(data: Form, key: str, low: float, high: float, default: float) -> float:
    value = data.get(key)
    if _blank(value):
        return default
    try:
        number = float(str(value))
    except (TypeError, ValueError):
        raise FormError(f"{key}: must be a number") from None
    if not math.isfinite(number):
        raise FormError(f"{key}: must be a finite number")
    if not low <= number <= high:
        raise FormError(f"{key}: must be between {low:g} and {high:g}")
    return number


def as_bool(data: Form, key: str) -> bool:
    value = data.get(key)
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "on", "1", "yes"):
        return True
    if text in ("false", "off", "0", "no", ""):
        return False
    raise FormError(f"{key}: must be true or false")


def parse_inject(data: Form, settings: Settings, max_model_len: int | None = None) -> InjectSpec:
    """`max_model_len`: the target engine's (default: this dashboard's settings)."""
    limit = max_model_len or settings.max_model_len
    prompt = data.get("prompt")
    if _blank(prompt):
        prompt = None
    elif not isinstance(prompt, str):
        raise FormError("prompt: must be text")
    elif len(prompt) > settings.max_prompt_chars:
        raise FormError(f"prompt: at most {settings.max_prompt_chars} characters")
    prompt_len = None
    if prompt is None:
        prompt_len = as_int(data, "prompt_len", 1, limit, default=32)
    shared = str(data.get("shared_prefix") or "none")
    if shared not in ("none", "system", "long"):
        raise FormError("shared_prefix: must be none, system or long")
    return InjectSpec(
        prompt=prompt,
        prompt_len=prompt_len,
        max_tokens=as_int(data, "max_tokens", 1, limit, default=32),
        priority=as_int(data, "priority", -1000, 1000, default=0),
        shared_prefix=shared,
        count=as_int(data, "count", 1, settings.max_burst, default=1),
        temperature=as_float(data, "temperature", 0.0, 5.0, 0.0),
    )


RERUN_INT_KNOBS = ("num_gpu_blocks", "block_size", "max_model_len")
RERUN_BOOL_KNOBS = ("enable_prefix_caching",)


def parse_config_changes(data: Form, rerun: bool = False) -> Knobs:
    """Live knobs; with `rerun`, also the ones fixed for a running engine (pool size...)."""
    int_knobs = INT_KNOBS + (RERUN_INT_KNOBS if rerun else ())
    bool_knobs = BOOL_KNOBS + (RERUN_BOOL_KNOBS if rerun else ())
    changes: Knobs = {}
    for key in int_knobs:
        if key in data and not _blank(data[key]):
            changes[key] = as_int(data, key, 0, KNOB_MAX)
    for key in bool_knobs:
        if key in data:
            changes[key] = as_bool(data, key)
    for key in FLOAT_KNOBS:
        if key in data and not _blank(data[key]):
            changes[key] = as_float(data, key, 0.0, 1.0, 0.0)
    if rerun and "vllm_version" in data and not _blank(data["vllm_version"]):
        changes["vllm_version"] = str(data["vllm_version"])
    if "policy" in data and not _blank(data["policy"]):
        policy = str(data["policy"])
        if policy not in ("fcfs", "priority"):
            raise FormError("policy: must be fcfs or priority")
        changes["policy"] = policy
    unknown = set(data) - set(int_knobs) - set(bool_knobs) - set(FLOAT_KNOBS) - {"policy"}
    if rerun:
        unknown.discard("vllm_version")
    if unknown:
        raise FormError(f"{sorted(unknown)[0]}: not a {'re-run' if rerun else 'live'} knob")
    if not changes:
        raise FormError("no knob given")
    return changes


def parse_workload(data: Form) -> WorkloadChanges:
    changes: WorkloadChanges = {}
    if "enabled" in data:
        changes["enabled"] = as_bool(data, "enabled")
    if not _blank(data.get("rate")):
        changes["rate"] = as_float(data, "rate", 0.01, 200.0, 1.0)
    if not _blank(data.get("prompt_len_mean")):
        changes["prompt_len_mean"] = as_int(data, "prompt_len_mean", 1, 100_000)
    if not _blank(data.get("max_tokens_mean")):
        changes["max_tokens_mean"] = as_int(data, "max_tokens_mean", 1, 100_000)
    unknown = set(data) - {"enabled", "rate", "prompt_len_mean", "max_tokens_mean"}
    if unknown:
        raise FormError(f"{sorted(unknown)[0]}: unknown workload field")
    if not changes:
        raise FormError("no workload field given")
    return changes


SESSION_KNOBS = ("async_scheduling", "num_speculative_tokens", "batching")


def parse_session_changes(data: Form) -> Knobs:
    """A new session's knobs: any re-run knob, and the engine loop's (may be none)."""
    loop = {k: v for k, v in data.items() if k in SESSION_KNOBS and not _blank(v)}
    rest = {k: v for k, v in data.items() if k not in SESSION_KNOBS}
    changes = (
        parse_config_changes(rest, rerun=True) if any(not _blank(v) for v in rest.values()) else {}
    )
    if "async_scheduling" in loop:
        changes["async_scheduling"] = as_bool(loop, "async_scheduling")
    if "num_speculative_tokens" in loop:
        changes["num_speculative_tokens"] = as_int(loop, "num_speculative_tokens", 0, 16)
    if "batching" in loop:
        if loop["batching"] not in ("continuous", "static"):
            raise FormError("batching: must be continuous or static")
        changes["batching"] = str(loop["batching"])
    return changes
