"""The suite's own file order (tests/file_order.py): the longest files first, measured
seconds written by a run and read back by the next."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests import file_order
from tests.conftest import ROOT


def _items(*nodeids: str) -> list[Any]:
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_files_run_longest_first_and_keep_their_tests_order() -> None:
    items = _items(
        "tests/a.py::one",
        "tests/b.py::one",
        "tests/new.py::one",
        "tests/a.py::two",
        "tests/c.py::one",
        "tests/b.py::two",
        "tests/other_new.py::one",
    )
    seconds = {"tests/a.py": 3.0, "tests/b.py": 120.0, "tests/c.py": 40.0}
    file_order.longest_first(items, seconds)
    assert [i.nodeid for i in items] == [
        "tests/b.py::one",
        "tests/b.py::two",
        "tests/c.py::one",
        "tests/a.py::one",
        "tests/a.py::two",
        "tests/new.py::one",  # not measured: after the measured, in collection order
        "tests/other_new.py::one",
    ]


def test_a_missing_or_bad_measure_leaves_the_collection_order(tmp_path: Path) -> None:
    assert file_order.known_seconds(tmp_path / "none.json") == {}
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    assert file_order.known_seconds(bad) == {}
    bad.write_text('{"tests/a.py": 2, "tests/b.py": "x"}')
    assert file_order.known_seconds(bad) == {"tests/a.py": 2.0}
    items = _items("tests/z.py::t", "tests/a.py::t")
    file_order.longest_first(items, {})
    assert [i.nodeid for i in items] == ["tests/z.py::t", "tests/a.py::t"]


def test_a_run_writes_each_files_seconds(tmp_path: Path) -> None:
    """A real pytest run of two small files with the plugin and the store variable set:
    every file's measured seconds land in the file, longest first."""
    (tmp_path / "test_slow.py").write_text(
        "import time\n\ndef test_a():\n    time.sleep(0.6)\n\ndef test_b():\n    pass\n"
    )
    (tmp_path / "test_fast.py").write_text("def test_c():\n    pass\n")
    out = tmp_path / "seconds.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env.update({"PYTHONPATH": str(ROOT), file_order.STORE_ENV: str(out)})
    args = ["-p", "tests.file_order", "-p", "no:cacheprovider", "-p", "no:xdist"]
    args += ["--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path)]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    written = json.loads(out.read_text())
    assert list(written) == ["test_slow.py", "test_fast.py"]
    assert written["test_slow.py"] >= 0.5 > written["test_fast.py"]
