"""Every frame's envelope and payload come from one place (protocol.envelope/frames):
the text is the v1 envelope the models describe, and both producers' iteration payloads
validate against the same wire model."""

from __future__ import annotations

import json
import subprocess
import sys

from app.frames.convert import event_to_frame
from app.frames.validate import Envelope, validate_frame
from engine.engine import Engine
from engine.events import ListSink
from engine.request import SamplingParams
from engine.runner.sim import SimRunner
from protocol.envelope import PROTOCOL_VERSION, encode, envelope, error_frame
from tests.engine.helpers import make_config


def _engine_frames() -> list[tuple[str, dict]]:  # type: ignore[type-arg]
    sink = ListSink()
    engine = Engine(make_config(), SimRunner(), sink)
    for i in range(3):
        engine.add_request(f"r{i}", [5, 9, 11 + i, 13], SamplingParams(max_tokens=3))
    while engine.has_unfinished_requests():
        engine.step()
    return [(kind, dict(data)) for kind, data in map(event_to_frame, sink.events)]


def test_envelope_text_is_the_v1_envelope_in_key_order() -> None:
    data = {"step": 3, "x": [1, 2]}
    text = envelope("iteration", "s-1", 7, encode(data), ts=12.5)
    frame = json.loads(text)
    assert list(frame) == ["v", "type", "session", "seq", "ts", "data"]
    assert frame == {"v": PROTOCOL_VERSION, "type": "iteration", "session": "s-1", "seq": 7,
                     "ts": 12.5, "data": data}  # fmt: skip
    assert Envelope.model_validate(frame).data == data
    assert "ts" not in json.loads(envelope("request", "s-1", 8, "{}"))
    assert json.loads(error_frame("no")) == {
        "v": PROTOCOL_VERSION, "type": "error", "session": None, "seq": None,
        "data": {"detail": "no"},
    }  # fmt: skip


def test_engine_frames_validate_against_the_wire_models() -> None:
    frames = _engine_frames()
    assert {kind for kind, _ in frames} >= {"iteration", "request"}
    for seq, (kind, data) in enumerate(frames, 1):
        assert validate_frame(kind, data) == data
        Envelope.model_validate_json(envelope(kind, "s", seq, encode(data)))


def test_the_vllm_adapter_builds_frames_without_the_web_stack() -> None:
    code = (
        "import sys, batchscope_vllm, batchscope_vllm.sender, batchscope_vllm.frames;"
        "heavy = ('fastapi', 'starlette', 'sqlalchemy', 'pydantic', 'engine', 'torch');"
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
