"""The runner seam: execute one step's plan, return sampled tokens. Never touches Request.

Every runner is a `ModelRunner`; the capabilities some runners add are Protocols of their
own, which the engine checks once, when it is built (isinstance on runtime Protocols).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from engine.outputs import ModelRunnerOutput, SchedulerOutput
from engine.runner.tokenizer import Tokenizer


class ModelRunner(Protocol):
    name: str
    simulated: bool
    """True when step times are modelled rather than measured."""

    def execute(self, output: SchedulerOutput) -> ModelRunnerOutput: ...

    def describe(self) -> dict[str, object]:
        """Model, device and dtype, for the session record."""
        ...


@runtime_checkable
class ChecksTokenIds(Protocol):
    """A runner with a vocabulary: prompts with ids it cannot embed are rejected."""

    def check_token_ids(self, token_ids: Sequence[int]) -> None:
        """Raise ValueError, with the message the rejection shows, for an id it cannot embed."""
        ...


@runtime_checkable
class HasTokenizer(Protocol):
    """A runner with a tokenizer: request marks also carry the decoded text."""

    tokenizer: Tokenizer


@runtime_checkable
class Drafter(Protocol):
    """A runner that proposes draft tokens after each update (speculative decoding)."""

    def propose(
        self, requests: Sequence[tuple[str, Sequence[int]]], num_spec_tokens: int
    ) -> list[list[int]]:
        """Drafts for each (req_id, token_ids), at most `num_spec_tokens` each."""
        ...
