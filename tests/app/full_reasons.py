"""Recorded frames with every iteration's waiting reasons as a full map (every waiting
request named), resolved from the compact form (`waiting_default` and the exceptions) by
following the waiting queue through the frames: what a test folds independently to check
what the app answers from the compact recording."""

from __future__ import annotations

from typing import Any


def with_full_reasons(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`frames` (envelopes, in seq order, the request marks included), each compact
    iteration replaced by its full-map twin."""
    waiting: dict[str, None] = {}
    aborted: set[str] = set()
    out: list[dict[str, Any]] = []
    for f in frames:
        d = f.get("data") or {}
        if f.get("type") == "request" and d.get("kind") == "aborted":
            aborted.add(d["req"])
        if f.get("type") == "iteration":
            for req in aborted:
                waiting.pop(req, None)
            waiting.update(dict.fromkeys(r for r in d["arrived"] if r not in aborted))
            aborted.clear()
            for req in (*d["new"], *d["resumed"]):
                waiting.pop(req, None)
            waiting.update(dict.fromkeys(p["req"] for p in d["preempted"]))
            default = d.get("waiting_default")
            if default is not None:
                exceptions = d["waiting_reasons"]
                full = {k: v for k, v in d.items() if k != "waiting_default"}
                full["waiting_reasons"] = {r: exceptions.get(r, default) for r in waiting}
                f = {**f, "data": full}
        out.append(f)
    return out
