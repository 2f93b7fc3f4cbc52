"""static/js/protocol.js is what tools/gen_protocol_js.py writes from the Python
definitions today: a code added or renamed in protocol/ and not regenerated fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from protocol.codes import BlockState, FrameType, SegmentKind, WaitingReason
from protocol.views import ROW_COLUMNS
from tests.conftest import ROOT

TOOL = ROOT / "tools" / "gen_protocol_js.py"
TARGET = ROOT / "static" / "js" / "protocol.js"


def test_the_committed_protocol_js_is_current() -> None:
    done = subprocess.run(
        [sys.executable, str(TOOL), "--check"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_it_carries_every_code_and_column() -> None:
    text = TARGET.read_text(encoding="utf-8")
    for member in (*WaitingReason, *BlockState, *FrameType, *SegmentKind):
        assert f'{member.name}: "{member.value}",' in text
    assert all(f'"{c}"' in text for c in ROW_COLUMNS)


def test_the_check_fails_on_a_stale_file(tmp_path: Path) -> None:
    # The tool checks the file next to it: run a copy of the checkout's tool against a
    # stale copy of the file.
    (tmp_path / "tools").mkdir()
    (tmp_path / "static" / "js").mkdir(parents=True)
    (tmp_path / "tools" / "gen_protocol_js.py").write_text(TOOL.read_text())
    stale = TARGET.read_text().replace('"kv_blocks"', '"kv_blocks_old"')
    (tmp_path / "static" / "js" / "protocol.js").write_text(stale)
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, str(tmp_path / "tools" / "gen_protocol_js.py"), "--check"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert done.returncode == 1 and "stale" in done.stdout
