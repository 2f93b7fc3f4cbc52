"""static/js/protocol.js and static/js/query.js are what tools/gen_protocol_js.py writes
from the Python definitions today: a code added or renamed in protocol/, a waiting
sentence reworded in engine/waiting.py, or a query word changed in app/request_table.py,
and not regenerated fails here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from app.frames.fold import HISTORY_STEPS
from app.frames.rows import END_MARKS, NEW_ROW, new_row
from app.request_table import SORTS, YES, RequestQuery
from protocol.codes import BlockState, FrameType, SegmentKind, WaitingReason
from protocol.views import ROW_COLUMNS
from tests.conftest import ROOT

TOOL = ROOT / "tools" / "gen_protocol_js.py"
TARGET = ROOT / "static" / "js" / "protocol.js"
QUERY = ROOT / "static" / "js" / "query.js"


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


def test_query_js_carries_the_twins_query_words() -> None:
    text = QUERY.read_text(encoding="utf-8")
    # The page's filters send these; the twin reads every one (paging aside).
    for key in ("status", "reason", "priority", "phase", "prefix_hit", "preempted", "q", "sort"):
        assert f'"{key}"' in text
    assert '"offset"' not in text and '"limit"' not in text
    assert SORTS[0] == RequestQuery().sort  # filters.js takes the first sort as the default
    assert f"export const SORTS = Object.freeze({json.dumps(list(SORTS))});" in text
    assert all(f'  "{word}": {str(flag).lower()},' in text for word, flag in YES.items())


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


def test_the_check_fails_when_a_waiting_sentence_changes_in_python() -> None:
    # A sentence reworded in engine/waiting.py and protocol.js not regenerated: the page
    # would word the reason as before while the JSON twins say the new words.
    code = (
        "import sys; sys.argv = ['gen']\n"
        "from engine import waiting\n"
        "old = waiting.WAITING_SENTENCES['max_num_seqs'][0]\n"
        "waiting.WAITING_SENTENCES['max_num_seqs'] = (\n"
        "    waiting.Sentence(old.text.replace('reached', 'is reached')),)\n"
        f"sys.path.insert(0, {str(TOOL.parent)!r})\n"
        "import gen_protocol_js\n"
        "sys.exit(gen_protocol_js.main(['--check']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 1 and "protocol.js is stale" in done.stdout, done.stderr


def test_a_new_row_has_every_column() -> None:
    # newRow (generated) takes the request's own columns; NEW_ROW gives every other one.
    own = {"req", "arrived_step", "arrived_t", "segments"}
    assert set(NEW_ROW) == set(ROW_COLUMNS) - own
    assert "export function newRow(req, arrived_step, arrived_t) {" in TARGET.read_text()


def test_the_pages_new_row_and_end_marks_are_the_folds(node_js: str) -> None:
    run = (
        f'import {{ END_MARKS, HISTORY_STEPS, newRow }} from "{TARGET.as_uri()}";\n'
        'console.log(JSON.stringify([newRow("r7", 3, 1.5), END_MARKS, HISTORY_STEPS]));\n'
    )
    done = subprocess.run(
        [node_js, "--no-warnings", "--input-type=module", "-e", run],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    row, end_marks, history_steps = json.loads(done.stdout)
    folded = {k: v for k, v in new_row("r7", 3, 1.5).items() if k != "segments"}
    assert row == {**folded, "marks": None, "segs": None}
    assert end_marks == {mark: list(end) for mark, end in END_MARKS.items()}
    assert history_steps == HISTORY_STEPS
