"""The order test files run in: the longest first, by the seconds each took in a full run
(tests/file_seconds.json), so that two xdist workers (`--dist loadfile`) end together.

xdist's own order for loadfile sorts files by how many tests they hold, which puts the
few-test files last -- and those are the slow ones here (a real `vllm serve`, the release
matrix, a signalled `serve` with a fleet node), so one worker can be left alone with a
file of minutes at the end. The Makefile passes `--no-loadscope-reorder`, so xdist keeps
the order this module sets (a plugin: tests/conftest.py's `pytest_plugins`); a file not
in the list (new since the last measure) runs after those that are, in collection order.

To measure again: `BATCHSCOPE_FILE_SECONDS=tests/file_seconds.json make test` writes
every file's seconds (setup, call and teardown of its tests, summed) when the run ends."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

SECONDS = Path(__file__).with_name("file_seconds.json")
STORE_ENV = "BATCHSCOPE_FILE_SECONDS"


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def known_seconds(path: Path = SECONDS) -> dict[str, float]:
    """file -> seconds of the last measure; empty if there is none or it does not parse."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float)}


def longest_first(items: list[pytest.Item], seconds: dict[str, float]) -> None:
    """Sort `items` in place: files by their known seconds, longest first; the tests of a
    file keep their order, and files not measured keep theirs, after the measured ones."""
    first_seen: dict[str, int] = {}
    for i, item in enumerate(items):
        first_seen.setdefault(_file(item.nodeid), i)

    def key(item: pytest.Item) -> tuple[float, int]:
        name = _file(item.nodeid)
        return (-seconds.get(name, -1.0), first_seen[name])

    items.sort(key=key)


class FileSeconds:
    """Sums each file's test seconds from the reports (on xdist's controller too) and
    writes them, rounded, to `path` at the end of the run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[_file(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):
            return  # a worker: its controller saw the same reports
        ranked = sorted(self.seconds.items(), key=lambda kv: -kv[1])
        self.path.write_text(json.dumps({k: round(v, 1) for k, v in ranked}, indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    store = os.environ.get(STORE_ENV)
    if store:
        config.pluginmanager.register(FileSeconds(Path(store)), "batchscope-file-seconds")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    longest_first(items, known_seconds())
