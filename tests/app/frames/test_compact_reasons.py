"""A session folded from compact waiting reasons (`waiting_default` and the exceptions)
reads exactly as the same run folded from full maps: the same rows and reasons at every
step, in snapshots, table rows and checkpoints."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from app.frames.fold import SessionState
from app.frames.validate import validate_frame
from tests.app.frames.both_forms import both_forms


def _rows(state: SessionState) -> list[dict[str, object]]:
    return [dict(r) for r in state.request_rows()]


@pytest.mark.parametrize("vllm_version", ["0.20", "0.34"])
def test_compact_and_full_reasons_fold_to_the_same_rows(vllm_version: str) -> None:
    compact, full = both_forms(vllm_version)
    assert any("waiting_default" in d for _, d in compact)
    assert not any("waiting_default" in d for _, d in full)
    a, b = SessionState("s"), SessionState("s")
    lazy = SessionState("s")  # read only at the end: nothing settled on the way
    waited = 0
    for seq, ((kind, dc), (_, df)) in enumerate(zip(compact, full, strict=True), 1):
        a.apply(kind, seq, dc)
        b.apply(kind, seq, df)
        lazy.apply(kind, seq, dc)
        rows = _rows(a)
        assert rows == _rows(b), (seq, kind)
        waited += sum(1 for r in rows if r["waiting_reason"])
    assert waited > 1000
    assert _rows(lazy) == _rows(b)
    assert lazy.snapshot() == b.snapshot()
    assert json.dumps(lazy.to_checkpoint()) == json.dumps(b.to_checkpoint())


def test_a_checkpoint_of_compact_reasons_resumes_identically() -> None:
    compact, full = both_forms("0.34")
    b = SessionState("s")
    for seq, (kind, d) in enumerate(full, 1):
        b.apply(kind, seq, d)
    for cut in (len(compact) // 3, len(compact) // 2):
        a = SessionState("s")
        for seq, (kind, d) in enumerate(compact[:cut], 1):
            a.apply(kind, seq, d)
        resumed = SessionState.from_checkpoint(json.loads(json.dumps(a.to_checkpoint())))
        for seq, (kind, d) in enumerate(compact[cut:], cut + 1):
            resumed.apply(kind, seq, d)
        assert _rows(resumed) == _rows(b)


def test_full_maps_after_compact_ones_keep_the_reasons() -> None:
    """A producer that switches form mid-session (an old one resumed, say)."""
    compact, full = both_forms("0.20")
    a, b = SessionState("s"), SessionState("s")
    half = len(compact) // 2
    for seq, ((kind, dc), (_, df)) in enumerate(zip(compact, full, strict=True), 1):
        a.apply(kind, seq, dc if seq <= half else df)
        b.apply(kind, seq, df)
        if seq in (half, half + 1, half + 7):
            assert _rows(a) == _rows(b)
    assert _rows(a) == _rows(b)


def test_an_unknown_waiting_default_is_rejected() -> None:
    compact, _ = both_forms("0.20")
    data = next(d for kind, d in compact if kind == "iteration" and "waiting_default" in d)
    with pytest.raises(ValidationError, match="waiting_default"):
        validate_frame("iteration", {**data, "waiting_default": "sleepy"})
    ok = validate_frame("iteration", {**data, "waiting_default": "kv_blocks"})
    assert ok["waiting_default"] == "kv_blocks"
    absent = {k: v for k, v in data.items() if k != "waiting_default"}
    assert "waiting_default" not in validate_frame("iteration", absent)
