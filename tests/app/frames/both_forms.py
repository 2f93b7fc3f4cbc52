"""One engine run's frames in both forms of the waiting reasons: compact (what the engine
sends: `waiting_default` and the exceptions) and full (every waiting request named, as
recordings made before `waiting_default` and other producers hold them)."""

from __future__ import annotations

import json
from typing import Any

from app.frames.convert import event_to_frame
from app.frames.validate import validate_frame
from engine.events import IterationEvent
from tests.engine.helpers import busy_run

Frame = tuple[str, dict[str, Any]]


def both_forms(vllm_version: str = "0.34") -> tuple[list[Frame], list[Frame]]:
    """(compact, full) frames of tests.engine.helpers.busy_run, validated and through
    JSON (as the fold gets them from the wire or the database)."""
    events, waiting_after = busy_run(vllm_version)
    compact: list[Frame] = []
    full: list[Frame] = []
    for ev in events:
        kind, data = event_to_frame(ev)
        whole = dict(data)
        if isinstance(ev, IterationEvent):
            whole.pop("waiting_default", None)
            whole["waiting_reasons"] = ev.waiting_reasons.resolve(waiting_after[ev.step])
        for out, d in ((compact, data), (full, whole)):
            out.append((kind, json.loads(json.dumps(validate_frame(kind, d)))))
    return compact, full
