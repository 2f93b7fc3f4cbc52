"""A simulate result written as one JSON object while the run goes: the header, then each
step's record as the step ends (one a line), then each request's record (one a line) and
the totals. The file loads (json.load) to exactly what engine.simulate.run_scenario
returns; only the order of keys differs (steps first, totals last, requests in the order
they finished, those never finished after them).

Request records come while steps are still being written, so they wait in a temporary
file (on disk, not in memory) until the steps' list is closed.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from typing import Any, TextIO


class ResultJson:
    """Writes one run's result to `out` (a text stream) piece by piece; a context manager
    (its temporary file is removed on leaving)."""

    def __init__(self, out: TextIO, scenario_name: str) -> None:
        self._out = out
        # Closed by close() or, if the run fails first, by __exit__.
        self._spill = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115
        self._num_steps = 0
        self._num_requests = 0
        out.write('{"scenario": ' + json.dumps(scenario_name) + ',\n"steps": [')

    def __enter__(self) -> ResultJson:
        return self

    def __exit__(self, *exc: object) -> None:
        self._spill.close()

    def step(self, record: dict[str, Any]) -> None:
        self._out.write(("\n" if not self._num_steps else ",\n") + json.dumps(record))
        self._num_steps += 1

    def request(self, req_id: str, record: dict[str, Any]) -> None:
        sep = "\n" if not self._num_requests else ",\n"
        self._spill.write(sep + json.dumps(req_id) + ": " + json.dumps(record))
        self._num_requests += 1

    def close(self, summary: dict[str, Any]) -> None:
        """Closes the steps' list, copies the requests in and ends with `summary`'s keys."""
        out = self._out
        out.write("\n],\n" if self._num_steps else "],\n")
        out.write('"requests": {')
        self._spill.seek(0)
        shutil.copyfileobj(self._spill, out)
        out.write("\n}" if self._num_requests else "}")
        for key, value in summary.items():
            out.write(",\n" + json.dumps(key) + ": " + json.dumps(value))
        out.write("\n}\n")
