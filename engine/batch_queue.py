"""vLLM's EngineCore batch queue (size 2) for async scheduling.

Batches are executed when they are submitted (the device works through them in order) and
their outputs are applied later; the deterministic model is that the device is never done
with a batch when the loop checks, so an output is applied only when the queue is full,
the new batch is empty, or there was nothing to schedule.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from engine.outputs import ModelRunnerOutput, SchedulerOutput

BATCH_QUEUE_SIZE = 2


class InFlightBatch(NamedTuple):
    output: SchedulerOutput
    runner_output: ModelRunnerOutput


class BatchQueue:
    def __init__(self, size: int = BATCH_QUEUE_SIZE) -> None:
        self.size = size
        self._queue: deque[InFlightBatch] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    def __bool__(self) -> bool:
        return bool(self._queue)

    def submit(self, output: SchedulerOutput, runner_output: ModelRunnerOutput) -> None:
        assert len(self._queue) < self.size
        self._queue.appendleft(InFlightBatch(output, runner_output))

    def is_full(self) -> bool:
        return len(self._queue) >= self.size

    def pop_oldest(self) -> InFlightBatch:
        return self._queue.pop()

    def late_tokens(self) -> dict[str, list[int]] | None:
        """The runner's view past the scheduler's: tokens the batches in flight sampled,
        per request, oldest batch first (None when nothing is in flight)."""
        if not self._queue:
            return None
        if len(self._queue) == 1:
            return self._queue[0].runner_output.sampled_token_ids
        late: dict[str, list[int]] = {}
        for batch in reversed(self._queue):  # oldest first
            for req_id, tokens in batch.runner_output.sampled_token_ids.items():
                late.setdefault(req_id, []).extend(tokens)
        return late
