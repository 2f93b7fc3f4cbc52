"""Iteration frames for the metrics tests, built by the producers' own payload builder:
one request `a` running alone, everything else overridable by keyword."""

from __future__ import annotations

from typing import Any

from protocol.frames import iteration_payload


def iteration(step: int, n: int, start: int, **fields: Any) -> dict[str, Any]:
    """Step `step` scheduling `n` tokens of `a` from `start` (a prefill unless n == 1);
    `fields` override iteration_payload's arguments, then extra keys are added as is."""
    prefill = n != 1
    args: dict[str, Any] = {
        "step": step,
        "t_start": step * 0.05,
        "duration": 0.05,
        "forward_ms": 1.0,
        "overhead_us": 1.0,
        "simulated": False,
        "scheduled": [
            {
                "req": "a",
                "n": n,
                "start": start,
                "phase": "prefill" if prefill else "decode",
                "prefix_hit": 0,
                "sample": True,
            }
        ],
        "new": [],
        "resumed": [],
        "preempted": [],
        "finished": [],
        "arrived": [],
        "rejected": [],
        "sampled": ["a"],
        "num_running": 1,
        "num_waiting": 0,
        "num_running_end": 1,
        "num_waiting_end": 0,
        "max_num_batched_tokens": 256,
        "num_scheduled_tokens": n,
        "max_num_seqs": 8,
        "prefill_tokens": n if prefill else 0,
        "decode_tokens": 0 if prefill else n,
        "kv_total": 10,
        "kv_used": 2,
        "kv_cached_free": 0,
        "kv_hit_tokens": 0,
        "kv_used_end": 2,
        "blocks": [],
        "waiting_reasons": {},
        "config_version": 0,
    }
    extra = {k: v for k, v in fields.items() if k not in args}
    args.update({k: v for k, v in fields.items() if k in args})
    return {**iteration_payload(**args), **extra}
