"""The engine-side request: token lists, progress counters and lifecycle status."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from engine.prefix_hash import BlockHash, extend_block_hashes
from engine.trace_prompt import TracePrompt, TraceTokenIds


class RequestStatus(enum.IntEnum):
    """Ordered as vLLM's: everything above PREEMPTED is finished."""

    WAITING = enum.auto()
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    FINISHED_STOPPED = enum.auto()
    FINISHED_LENGTH_CAPPED = enum.auto()
    FINISHED_ABORTED = enum.auto()
    FINISHED_REJECTED = enum.auto()

    @staticmethod
    def is_finished(status: RequestStatus) -> bool:
        return status > RequestStatus.PREEMPTED


FINISH_REASONS: dict[RequestStatus, str] = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH_CAPPED: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
    RequestStatus.FINISHED_REJECTED: "rejected",
}


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How the runner picks tokens; the scheduler only reads `max_tokens` and stops."""

    max_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = True
    eos_token_id: int | None = None
    stop_token_ids: tuple[int, ...] = ()


class Request:
    """Mutable request state, owned by the engine thread alone."""

    __slots__ = (
        "arrival_step",
        "arrival_time",
        "block_hashes",
        "block_size",
        "enable_hashing",
        "is_prefill_chunk",
        "num_accepted_tokens",
        "num_cached_tokens",
        "num_computed_tokens",
        "num_draft_tokens",
        "num_in_flight_tokens",
        "num_output_placeholders",
        "num_preemptions",
        "num_prompt_tokens",
        "num_stale_output_tokens",
        "num_tokens",
        "priority",
        "request_id",
        "sampling_params",
        "spec_token_ids",
        "status",
        "stop_reason",
        "token_ids",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: Sequence[int],
        sampling_params: SamplingParams,
        arrival_time: float,
        priority: int = 0,
        block_size: int = 16,
        enable_hashing: bool = True,
        arrival_step: int = 0,
    ) -> None:
        self.request_id = request_id
        # A trace's prompt stays lazy (engine.trace_prompt): its tokens are made only
        # when a runner reads them, its block hashes from its chain of hash ids.
        self.token_ids: list[int] | TraceTokenIds = (
            TraceTokenIds(prompt_token_ids)
            if isinstance(prompt_token_ids, TracePrompt)
            else list(prompt_token_ids)
        )
        self.num_prompt_tokens = len(prompt_token_ids)
        self.num_tokens = self.num_prompt_tokens
        """len(token_ids), kept as tokens are appended (a trace's token ids are lazy, and
        their len() a Python call the scheduler would make millions of times)."""
        self.sampling_params = sampling_params
        self.arrival_time = arrival_time
        self.arrival_step = arrival_step
        self.priority = priority
        self.status = RequestStatus.WAITING
        self.num_computed_tokens = 0
        self.num_preemptions = 0
        # Prefix-cache hit tokens at first admission; -1 until then (vLLM's habit).
        self.num_cached_tokens = -1
        self.stop_reason: int | None = None
        # Async scheduling: tokens of batches in flight, counted in num_computed_tokens
        # before they are known (vLLM's output placeholders).
        self.num_output_placeholders = 0
        # vLLM 0.26+: tokens scheduled in batches whose output is not applied yet; 0.27+:
        # those of them still in flight when the request was preempted (stale output).
        self.num_in_flight_tokens = 0
        self.num_stale_output_tokens = 0
        # Speculative decoding: the drafter's proposal, scheduled after the real token.
        self.spec_token_ids: list[int] = []
        # After scheduling: the plan does not reach the end of the sequence (no sample).
        self.is_prefill_chunk = False
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self.block_size = block_size
        self.enable_hashing = enable_hashing
        self.block_hashes: list[BlockHash] = []
        if enable_hashing:
            if isinstance(prompt_token_ids, TracePrompt):
                self.block_hashes = prompt_token_ids.block_hashes(block_size)
            else:
                extend_block_hashes(self.block_hashes, self.token_ids, block_size)

    @property
    def max_tokens(self) -> int:
        return self.sampling_params.max_tokens

    @property
    def num_tokens_with_spec(self) -> int:
        return self.num_tokens + len(self.spec_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return self.num_tokens - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def trace_prompt(self) -> TracePrompt | None:
        """The lazy prompt of a trace request; None when the prompt is a token list."""
        tokens = self.token_ids
        return tokens.prompt if isinstance(tokens, TraceTokenIds) else None

    def input_token_ids(self, start: int, end: int) -> Sequence[int]:
        """Token ids of positions start .. end-1 (a step's inputs): a tuple, or for a
        trace request a lazy span (the SimRunner reads only its last token)."""
        tokens = self.token_ids
        if isinstance(tokens, TraceTokenIds):
            return tokens.span(start, end)
        return tuple(tokens[start:end])

    def append_output_token_id(self, token_id: int) -> None:
        self.token_ids.append(token_id)
        self.num_tokens += 1
        if self.enable_hashing and self.num_tokens % self.block_size == 0:
            extend_block_hashes(self.block_hashes, self.token_ids, self.block_size)

    def is_finished(self) -> bool:
        return self.status > RequestStatus.PREEMPTED

    def get_finished_reason(self) -> str | None:
        return FINISH_REASONS.get(self.status)

    def __lt__(self, other: Request) -> bool:
        # Priority order: lower value first, then earlier arrival, then id (vLLM).
        if self.priority != other.priority:
            return self.priority < other.priority
        if self.arrival_time != other.arrival_time:
            return self.arrival_time < other.arrival_time
        return self.request_id < other.request_id

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, {self.status.name}, "
            f"computed={self.num_computed_tokens}/{self.num_tokens})"
        )
