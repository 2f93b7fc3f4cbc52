"""vLLM's EngineCore batch queue (size 2) for async scheduling.

Batches are executed when they are submitted (the device works through them in order) and
their outputs are applied later; the deterministic model is that the device is never done
with a batch when the loop checks, so an output is applied only when the queue is full,
the new batch is empty, or there was nothing to schedule.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import NamedTuple

from engine.outputs import ModelRunnerOutput, SchedulerOutput
from engine.request import Request

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

    def in_flight_steps(self) -> list[int]:
        """Steps whose batches are in flight, oldest first."""
        return [b.output.step for b in reversed(self._queue)]

    def complete_inputs(
        self, output: SchedulerOutput, requests: dict[str, Request]
    ) -> SchedulerOutput:
        """The runner's view: fill input positions the scheduler only knows as output
        placeholders with the tokens the batches in flight sampled for them."""
        if not self._queue:
            return output
        pending: dict[str, list[int]] | None = None
        chunks = list(output.chunks)
        changed = False
        for i, chunk in enumerate(chunks):
            want = chunk.num_tokens - len(chunk.spec_token_ids)
            if len(chunk.token_ids) >= want:
                continue
            if pending is None:
                pending = {}
                for batch in reversed(self._queue):  # oldest first
                    for req_id, tokens in batch.runner_output.sampled_token_ids.items():
                        pending.setdefault(req_id, []).extend(tokens)
            view = requests[chunk.req_id].token_ids + pending.get(chunk.req_id, [])
            start = chunk.num_computed_before
            chunks[i] = chunk._replace(token_ids=tuple(view[start : start + want]))
            changed = True
        if not changed:
            return output
        return dataclasses.replace(output, chunks=tuple(chunks))
