"""The Gantt stays usable at scale: all rows of a 2,000-request session are drawn.

The 1.5 s target itself is checked by tools/ui_bench.py (`make bench`); this test only
guards against gross regressions, with headroom for a busy two-core CI box.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.harness import RENDER_ALL_JS, Console, synthetic_snapshot

pytestmark = pytest.mark.slow
LIMIT_MS = 4500  # 3x the 1.5 s bench target


def test_a_2000_request_gantt_renders_within_budget(page: Any, console: Console) -> None:
    page.evaluate("() => { BS.conn.ws.onclose = null; BS.conn.ws.close(); }")
    times = []
    for attempt in range(2):  # best of two: this box may be busy with other work
        snap = synthetic_snapshot(2000)
        snap["session"] = snap["data"]["session"] = f"scale-{attempt}"
        times.append(page.evaluate(RENDER_ALL_JS, snap))
        assert page.get_attribute("#gantt", "data-rows") == "2000"
    assert page.locator("#gantt .bars path").count() > 6000
    print(f"2,000-request Gantt: {times} ms")
    assert min(times) <= LIMIT_MS, f"2,000-request Gantt took {times} ms"
    assert console.errors == []
