"""One step's plan while Scheduler.schedule() builds it, and the chunks it turns into."""

from __future__ import annotations

from engine.outputs import ScheduledChunk
from engine.request import Request
from protocol.wire import WaitingDetail


class StepPlan:
    """Mutable bookkeeping of one schedule() call (vLLM keeps these as locals)."""

    __slots__ = (
        "cache_aware",
        "computed_before",
        "new_blocks_of",
        "new_reqs",
        "num_scheduled_tokens",
        "padding",
        "passed_over",
        "preempted",
        "prefill_admitted",
        "prefill_scheduled",
        "prefix_cache_hits",
        "prefix_cache_queries",
        "prefix_hits",
        "resumed_reqs",
        "scheduled_running",
        "spec_token_ids",
        "token_budget",
        "wait_detail",
    )

    def __init__(self, token_budget: int) -> None:
        self.token_budget = token_budget
        self.num_scheduled_tokens: dict[str, int] = {}
        """req_id -> tokens this step, drafts included, in scheduling order."""
        self.new_blocks_of: dict[str, list[int]] = {}
        self.computed_before: dict[str, int] = {}
        self.prefix_hits: dict[str, int] = {}
        self.spec_token_ids: dict[str, list[int]] = {}
        """req_id -> drafts scheduled (vLLM's scheduled_spec_decode_tokens)."""
        self.new_reqs: list[Request] = []
        self.resumed_reqs: list[Request] = []
        self.scheduled_running: list[Request] = []
        self.preempted: list[Request] = []
        self.padding: dict[str, int] = {}
        """Static batching: pad tokens per request admitted (to the batch's longest)."""
        self.wait_detail: WaitingDetail = {}
        """The numbers behind the gate that stopped the waiting scan (engine.waiting)."""
        self.prefill_scheduled = False
        """A running request's prefill chunk was scheduled (vLLM's prefill_scheduled)."""
        self.prefill_admitted = False
        """A waiting request was admitted with prompt left to compute (beyond one token)."""
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        """Prefix-cache stats of this step (new requests), counted as the release does."""
        self.cache_aware: WaitingDetail = {}
        """0.34+ cache-aware admission moved a request ahead this step: which, how many
        of its prompt tokens were cached, the window (engine.waiting)."""
        self.passed_over: set[str] = set()
        """The requests cache-aware admission moved back (their reason: cache_aware_order)."""

    def unschedule(self, request: Request) -> None:
        """Roll back what was planned for a running request preempted later this step."""
        req_id = request.request_id
        self.scheduled_running.remove(request)
        self.token_budget += self.num_scheduled_tokens.pop(req_id)
        self.new_blocks_of.pop(req_id, None)
        self.computed_before.pop(req_id)
        self.spec_token_ids.pop(req_id, None)

    def make_chunks(
        self, requests: dict[str, Request], late_tokens: dict[str, list[int]] | None = None
    ) -> tuple[ScheduledChunk, ...]:
        """The plan as plain data, after num_computed_tokens advanced. Input positions past
        the known tokens (async placeholders) take their ids from `late_tokens`."""
        computed_before = self.computed_before
        new_blocks_of = self.new_blocks_of
        prefix_hits = self.prefix_hits
        spec = self.spec_token_ids
        padding = self.padding
        no_ints: tuple[int, ...] = ()
        chunks = []
        for req_id, n in self.num_scheduled_tokens.items():
            request = requests[req_id]
            start = computed_before[req_id]
            drafts = spec.get(req_id)
            end = start + n - (len(drafts) if drafts else 0)
            inputs = request.input_token_ids(start, end)
            num_known = request.num_tokens
            if end > num_known and late_tokens:
                late = late_tokens.get(req_id, ())
                inputs = tuple(inputs) + tuple(late[max(0, start - num_known) : end - num_known])
            blocks = new_blocks_of.get(req_id)
            chunks.append(
                ScheduledChunk(
                    req_id,
                    n,
                    start,
                    # Prompt positions, or a recompute of more than the newest token.
                    start < request.num_prompt_tokens or start + 1 < num_known,
                    not request.is_prefill_chunk,
                    prefix_hits.get(req_id, 0),
                    req_id in prefix_hits,
                    tuple(blocks) if blocks else no_ints,
                    inputs,
                    tuple(drafts) if drafts else no_ints,
                    padding.get(req_id, 0) if padding else 0,
                )
            )
        return tuple(chunks)
