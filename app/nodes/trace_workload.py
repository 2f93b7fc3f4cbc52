"""`--workload trace:FILE`: a Mooncake trace played into a live engine, each request added
once the engine's clock reaches its timestamp, read from the file line by line as the clock
goes, so memory stays what the engine holds however long the trace. The file is checked
whole first (one pass, keeping no rows) so a bad or unsorted line is refused before the
session starts, with its line number; a trace must be sorted by timestamp (engine.mooncake
.iter_trace)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from engine.config import EngineConfig
from engine.engine import Engine
from engine.mooncake import TraceError, TraceRow, iter_trace, trace_request

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TraceWorkload:
    """A checked trace file and the knobs of the engine it plays into."""

    path: Path
    config: EngineConfig
    block_tokens: int
    num_requests: int

    @property
    def name(self) -> str:
        return f"trace {self.path.name}"

    def arrivals(self) -> TraceArrivals:
        return TraceArrivals(self)


def load_trace_workload(path: str, config: EngineConfig, block_tokens: int) -> TraceWorkload:
    """Checks the whole trace in one pass, keeping no rows. Raises TraceError (line
    numbers; unsorted lines and requests too long for `max_model_len` included) or
    OSError / UnicodeDecodeError."""
    count = 0
    with Path(path).open(encoding="utf-8") as fh:
        for _row in iter_trace(fh, block_tokens, config.scheduler.max_model_len):
            count += 1
    if not count:
        raise TraceError(0, "no requests (an empty trace)")
    return TraceWorkload(Path(path), config, block_tokens, count)


class TraceArrivals:
    """before_step hook: adds the trace's requests (`trace-0`, `trace-1`, ... in line
    order) once the engine's clock reaches their timestamps, each keeping the time it was
    due as its arrival time; holds the open file and the next row only."""

    def __init__(self, workload: TraceWorkload) -> None:
        self.workload = workload
        self.num_added = 0
        self._file: TextIO | None = None
        self._rows: Iterator[TraceRow] | None = None
        self._next: TraceRow | None = None
        self.done = False

    def _advance(self) -> None:
        assert self._rows is not None
        try:
            self._next = next(self._rows, None)
        except (TraceError, OSError, UnicodeDecodeError) as exc:
            # The file changed after it was checked: stop adding, and say so.
            log.error("%s: no more arrivals after %d: %s", self.workload.name, self.num_added, exc)
            self._next = None
        if self._next is None:
            self.done = True
            if self._file is not None:
                self._file.close()

    @property
    def next_due_ms(self) -> float | None:
        """The next request's timestamp (None before the first call and once done)."""
        return self._next.timestamp if self._next is not None else None

    def __call__(self, engine: Engine) -> None:
        if self.done:
            return
        w = self.workload
        if self._rows is None:
            self._file = w.path.open(encoding="utf-8")
            self._rows = iter_trace(self._file, w.block_tokens, w.config.scheduler.max_model_len)
            self._advance()
        now_ms = engine.now() * 1000.0
        while self._next is not None and self._next.timestamp <= now_ms:
            req = trace_request(self.num_added, self._next, w.block_tokens)
            engine.add_request(
                req.id,
                req.prompt_token_ids,
                req.sampling_params,
                req.priority,
                self._next.timestamp / 1000.0,
            )
            self.num_added += 1
            self._advance()
