"""SimRunner: no model. Deterministic tokens and a linear step-time cost model.

The token rule is the scenario format's: a token sampled at absolute position p after
token t is `1 + (31*t + 17*p) % 31999`; drafts and their verification follow
docs/scenarios.md (exact, so speculative runs are reproducible). Step time is
`base_ms + per_token_ms * tokens + per_seq_ms * seqs + per_context_ms * context/1000`,
with coefficients that `batchscope calibrate` measures on the torch runner.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from engine.outputs import ModelRunnerOutput, SchedulerOutput


class StepCost(Protocol):
    """A step-time model other than the linear one (see engine.runner.cost_model)."""

    def estimate_ms(self, output: SchedulerOutput) -> float: ...

    def as_dict(self) -> dict[str, Any]: ...


def sim_token(prev_token: int, position: int) -> int:
    return 1 + (31 * prev_token + 17 * position) % 31999


def sim_drafts(token_ids: Sequence[int], k: int, num_spec_tokens: int) -> list[int]:
    """Drafts for the request at index k of the drafter's list, with P tokens ending in t:
    none if (P + k) % 4 == 0; else K tokens chaining the target rule from t, where draft j
    is wrong (true_j % 31999 + 1) unless (7 * (P + j) + 3 * k) % 10 < 7."""
    num_tokens = len(token_ids)
    if (num_tokens + k) % 4 == 0:
        return []
    drafts: list[int] = []
    prev = token_ids[-1]
    for j in range(num_spec_tokens):
        true_j = sim_token(prev, num_tokens + j)
        right = (7 * (num_tokens + j) + 3 * k) % 10 < 7
        drafts.append(true_j if right else true_j % 31999 + 1)
        prev = true_j
    return drafts


def verify_drafts(last_token: int, position: int, drafts: Sequence[int]) -> list[int]:
    """The target's tokens for positions `position`.. after `last_token`: one per leading
    draft that equals the target's, plus the target's token after them."""
    out = [sim_token(last_token, position)]
    for j, draft in enumerate(drafts):
        if draft != out[-1]:
            break
        out.append(sim_token(draft, position + j + 1))
    return out


@dataclass(frozen=True, slots=True)
class CostModel:
    base_ms: float = 2.0
    per_token_ms: float = 0.02
    per_seq_ms: float = 0.05
    per_context_ms: float = 0.01

    def step_ms(self, num_tokens: int, num_seqs: int, context_tokens: int) -> float:
        if num_seqs == 0:
            return 0.0
        return (
            self.base_ms
            + self.per_token_ms * num_tokens
            + self.per_seq_ms * num_seqs
            + self.per_context_ms * context_tokens / 1000.0
        )


class SimRunner:
    name = "sim"
    simulated = True

    def __init__(self, cost_model: CostModel | StepCost | None = None) -> None:
        """`cost_model`: the linear CostModel, or any model with `estimate_ms(output)`
        (engine.runner.cost_model: the roofline and its presets)."""
        self.cost_model = cost_model or CostModel()

    def execute(self, output: SchedulerOutput) -> ModelRunnerOutput:
        sampled: dict[str, list[int]] = {}
        context = 0
        for chunk in output.chunks:
            end = chunk.num_computed_before + chunk.num_tokens
            context += end
            if chunk.spec_token_ids:
                sampled[chunk.req_id] = verify_drafts(
                    chunk.token_ids[-1], end - len(chunk.spec_token_ids), chunk.spec_token_ids
                )
            elif chunk.sample:
                sampled[chunk.req_id] = [sim_token(chunk.token_ids[-1], end)]
        cost = self.cost_model
        if isinstance(cost, CostModel):
            forward_ms = cost.step_ms(
                output.total_num_scheduled_tokens + output.num_padding_tokens,
                len(output.chunks),
                context,
            )
        else:
            forward_ms = cost.estimate_ms(output)
        return ModelRunnerOutput(sampled_token_ids=sampled, forward_ms=forward_ms, simulated=True)

    def propose(
        self, requests: Sequence[tuple[str, Sequence[int]]], num_spec_tokens: int
    ) -> list[list[int]]:
        """The deterministic drafter: see `sim_drafts`."""
        return [
            sim_drafts(token_ids, k, num_spec_tokens) for k, (_, token_ids) in enumerate(requests)
        ]

    def describe(self) -> dict[str, object]:
        cost = self.cost_model
        described = asdict(cost) if isinstance(cost, CostModel) else cost.as_dict()
        return {"runner": "sim", "model": "none (simulated)", "cost_model": described}
