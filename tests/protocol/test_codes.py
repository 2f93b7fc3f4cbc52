"""protocol: standard library only, and its codes are plain strings on the wire."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from protocol.codes import BlockState, FrameType, Phase, RequestMark, SegmentKind, WaitingReason
from protocol.frames import request_payload

PACKAGE = Path(__file__).resolve().parents[2] / "protocol"


def test_protocol_imports_only_the_standard_library_and_itself() -> None:
    outside = set()
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("protocol", "__future__"):
                    outside.add(f"{path.name}: {name}")
    assert outside == set()


def test_importing_protocol_imports_nothing_else_of_ours() -> None:
    code = (
        "import sys, protocol.codes, protocol.wire, protocol.control, protocol.envelope,"
        " protocol.frames, protocol.session;"
        "ours = ('app', 'engine', 'batchscope_vllm', 'pydantic');"
        "print(sorted(m for m in ours if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_code_is_its_string() -> None:
    mark = request_payload("r1", RequestMark.FIRST_TOKEN, 3, 0.5)
    assert json.dumps(mark) == json.dumps(
        {"req": "r1", "kind": "first_token", "step": 3, "t": 0.5, "detail": {}}
    )
    assert {"kv_blocks": 1}[WaitingReason.KV_BLOCKS] == 1
    assert f"{BlockState.SHARED}" == "shared" and str(FrameType.GAP) == "gap"
    assert json.loads(json.dumps({WaitingReason.PAUSED: BlockState.FREE})) == {"paused": "free"}


def test_a_scheduled_segment_is_its_phase() -> None:
    # A scheduled row's phase names its Gantt segment (app.frames.fold, static/js/model.js).
    assert {p.value for p in Phase} <= {k.value for k in SegmentKind}
