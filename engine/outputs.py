"""Plain data crossing scheduler -> runner -> scheduler: the plan and the runner's result.

`ScheduledChunk` is a NamedTuple rather than a frozen dataclass: one is built per
scheduled request per step, and a NamedTuple is several times cheaper to create
while being just as immutable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from engine.reasons import NO_WAITING, WaitingReasons
from engine.request import Request, SamplingParams
from protocol.wire import WaitingDetail

PAD_DRAFT = -1
"""vLLM's placeholder draft (a new decode padded to 1 + K tokens, 0.25+): never accepted."""


class ScheduledChunk(NamedTuple):
    """One request's share of one step."""

    req_id: str
    num_tokens: int
    """num_scheduled_tokens: positions fed to the model this step."""
    num_computed_before: int
    """num_computed_tokens when the plan was made; the chunk starts at this position."""
    is_prefill: bool
    """More than the single newest token is computed (a prompt chunk or a recompute)."""
    sample: bool
    """The chunk reaches the end of the known tokens, so the model samples one token."""
    num_prefix_hit_tokens: int
    """Prefix-cache hit tokens credited at this (re)admission; 0 for running requests."""
    is_new: bool
    """The request (re)entered RUNNING this step: `block_ids` is its whole block table."""
    block_ids: tuple[int, ...]
    """Whole block table if `is_new`, else only the blocks appended this step."""
    token_ids: Sequence[int]
    """The input token ids of this chunk (positions num_computed_before ...), drafts
    excluded. Under async scheduling the scheduler does not know the tokens of batches
    still in flight: the engine completes them from its runner's outputs."""
    spec_token_ids: tuple[int, ...] = ()
    """Draft tokens scheduled after the real token (speculative decoding), to verify."""
    num_padding_tokens: int = 0
    """Static batching: pad positions computed beside this prompt (not in num_tokens)."""


@dataclass(frozen=True, slots=True)
class SchedulerOutput:
    """The plan of one step, in vLLM's vocabulary."""

    step: int
    chunks: tuple[ScheduledChunk, ...]
    """In scheduling order: running requests first, then admitted waiting ones."""
    total_num_scheduled_tokens: int
    new_req_ids: tuple[str, ...]
    resumed_req_ids: tuple[str, ...]
    preempted_req_ids: tuple[str, ...]
    """In preemption order."""
    preempted_tokens_lost: tuple[int, ...]
    """num_computed_tokens each victim lost (to be recomputed)."""
    finished_req_ids: tuple[str, ...]
    """Finished between the previous step and this one (aborts)."""
    num_running: int
    num_waiting: int
    kv_blocks_used: int
    waiting_reasons: WaitingReasons
    """For each request still waiting: the first gate that held it (compact: a default
    and its exceptions)."""
    waiting_detail: WaitingDetail = field(default_factory=lambda: WaitingDetail())
    """The numbers behind the gate that stopped the waiting scan (engine.waiting)."""
    sampling_params: dict[str, SamplingParams] = field(default_factory=dict)
    """For requests that (re)entered RUNNING this step; runners cache them by req_id."""
    num_spec_tokens: int = 0
    """Draft tokens scheduled this step, over all requests (included in the chunks)."""
    num_padding_tokens: int = 0
    """Static batching: wasted positions computed this step (prompt padding and the rows
    of finished members), not counted in total_num_scheduled_tokens."""
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    """Prefix-cache lookups of new requests this step, in tokens queried and hit, counted
    as the session's vLLM release counts them (0.20: every lookup; 0.27+: admissions)."""

    @classmethod
    def make_empty(
        cls, step: int, num_running: int, num_waiting: int, kv_blocks_used: int
    ) -> SchedulerOutput:
        """A step that scheduled nothing, with the queues and KV use as they are."""
        return cls(
            step, (), 0, (), (), (), (), (), num_running, num_waiting, kv_blocks_used, NO_WAITING
        )

    @property
    def num_scheduled_tokens(self) -> dict[str, int]:
        return {c.req_id: c.num_tokens for c in self.chunks}


class UpdateResult(NamedTuple):
    """What update_from_output() did with one batch's output."""

    sampled_req_ids: list[str]
    """Requests that got tokens appended, in batch order."""
    finished: list[Request]
    """Requests that stopped (their blocks are freed)."""
    appended_tokens: dict[str, int]
    """Tokens appended per request (after trimming at a stop)."""
    accepted_tokens: dict[str, int]
    """Accepted drafts per request whose drafts were verified."""
    drafted: list[Request]
    """Requests of the batch that got tokens, in batch order: the drafter's list."""


@dataclass(frozen=True, slots=True)
class ModelRunnerOutput:
    """What the runner returns: sampled tokens per request and the time it took."""

    sampled_token_ids: dict[str, list[int]]
    forward_ms: float = 0.0
    simulated: bool = True
