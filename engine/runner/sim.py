"""SimRunner: no model. Deterministic tokens and a linear step-time cost model.

The token rule is the scenario format's: a token sampled at absolute position p after
token t is `1 + (31*t + 17*p) % 31999`. Step time is
`base_ms + per_token_ms * tokens + per_seq_ms * seqs + per_context_ms * context/1000`,
with coefficients that `batchscope calibrate` measures on the torch runner.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from engine.outputs import ModelRunnerOutput, SchedulerOutput


def sim_token(prev_token: int, position: int) -> int:
    return 1 + (31 * prev_token + 17 * position) % 31999


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

    def __init__(self, cost_model: CostModel | None = None) -> None:
        self.cost_model = cost_model or CostModel()

    def execute(self, output: SchedulerOutput) -> ModelRunnerOutput:
        sampled: dict[str, list[int]] = {}
        context = 0
        for chunk in output.chunks:
            end = chunk.num_computed_before + chunk.num_tokens
            context += end
            if chunk.sample:
                sampled[chunk.req_id] = [sim_token(chunk.token_ids[-1], end)]
        forward_ms = self.cost_model.step_ms(
            output.total_num_scheduled_tokens, len(output.chunks), context
        )
        return ModelRunnerOutput(sampled_token_ids=sampled, forward_ms=forward_ms, simulated=True)

    def describe(self) -> dict[str, object]:
        return {"runner": "sim", "model": "none (simulated)", "cost_model": asdict(self.cost_model)}
