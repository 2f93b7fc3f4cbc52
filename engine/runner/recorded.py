"""RecordedRunner: the SimRunner on a recording's own clock (the default re-run runner).

While the re-run's plan equals the recording's (`following`), each step takes its
recorded time, a speculative batch accepts as many drafts per request as the recording
did, and the drafter proposes as many drafts as the recording scheduled next (what the
SimRunner's drafter would propose, where the recording did not schedule the request at
its next step: what was proposed then is not recorded); after the
first divergence, step times come from the cost model fitted on the recording's steps
and drafts follow the SimRunner's rules. Either way a request that stopped on EOS or a
stop token in the recording samples `EOS_TOKEN` at its recorded output length (the
re-run gives such requests `eos_token_id=EOS_TOKEN`): the SimRunner's tokens are not the
recorded model's, so it would never stop there by itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from engine.outputs import ModelRunnerOutput, ScheduledChunk, SchedulerOutput
from engine.runner.recorded_timeline import RecordedTimeline
from engine.runner.sim import SimRunner, sim_drafts, sim_token, verify_drafts

EOS_TOKEN = 0
"""Never a SimRunner token (those are 1..31999)."""


class SettableClock(Protocol):
    now: float


class RecordedRunner:
    name = "recorded"
    simulated = True

    def __init__(
        self,
        timeline: RecordedTimeline,
        clock: SettableClock,
        prompt_lengths: Mapping[str, int],
    ) -> None:
        self.timeline = timeline
        self.clock = clock
        self.prompt_lengths = dict(prompt_lengths)
        self.cost = timeline.fitted_cost()
        self.sim = SimRunner(self.cost)
        self.following = True
        self._last_step = -1

    def diverge(self) -> None:
        """The plan left the recording's: from now on the fitted cost model decides."""
        self.following = False

    def execute(self, output: SchedulerOutput) -> ModelRunnerOutput:
        step = output.step
        self._last_step = step
        sampled: dict[str, list[int]] = {}
        for chunk in output.chunks:
            tokens = self._sampled(step, chunk)
            if tokens:
                sampled[chunk.req_id] = self._stopped(chunk, tokens)
        if self.following and step < len(self.timeline):
            rec = self.timeline.steps[step]
            forward_ms = rec.forward_ms
            # The engine advances its virtual clock by forward_ms (engine.virtual_clock):
            # the rest of the recorded step (scheduling, sampling) is added here.
            self.clock.now += max(rec.duration - forward_ms / 1000.0, 0.0)
        else:
            forward_ms = self.sim.execute(output).forward_ms
        return ModelRunnerOutput(sampled_token_ids=sampled, forward_ms=forward_ms, simulated=True)

    def _sampled(self, step: int, chunk: ScheduledChunk) -> list[int]:
        end = chunk.num_computed_before + chunk.num_tokens
        drafts = chunk.spec_token_ids
        if not drafts:
            return [sim_token(chunk.token_ids[-1], end)] if chunk.sample else []
        first = end - len(drafts)
        accepted = self.timeline.accepted.get((step, chunk.req_id)) if self.following else None
        if accepted is None:
            return verify_drafts(chunk.token_ids[-1], first, drafts)
        kept = list(drafts[:accepted])
        prev = kept[-1] if kept else chunk.token_ids[-1]
        return [*kept, sim_token(prev, first + len(kept))]

    def _stopped(self, chunk: ScheduledChunk, tokens: list[int]) -> list[int]:
        """`tokens` (sampled from position end - drafts), the one that reaches the
        recorded stop length replaced by EOS_TOKEN and those after it dropped."""
        length = self.timeline.stop_lengths.get(chunk.req_id)
        prompt = self.prompt_lengths.get(chunk.req_id)
        if length is None or prompt is None:
            return tokens
        first = chunk.num_computed_before + chunk.num_tokens - len(chunk.spec_token_ids)
        index = prompt + length - 1 - first
        if 0 <= index < len(tokens):
            return [*tokens[:index], EOS_TOKEN]
        return tokens

    def propose(
        self, requests: Sequence[tuple[str, Sequence[int]]], num_spec_tokens: int
    ) -> list[list[int]]:
        if not self.following:
            return [sim_drafts(ids, k, num_spec_tokens) for k, (_, ids) in enumerate(requests)]
        out: list[list[int]] = []
        for k, (req, ids) in enumerate(requests):
            count = self.timeline.drafts_after(self._last_step, req)
            if count is None:
                # Not scheduled at the next step: the SimRunner drafter's count.
                count = len(sim_drafts(ids, k, num_spec_tokens))
            drafts: list[int] = []
            prev = ids[-1]
            for j in range(min(count, num_spec_tokens)):
                prev = sim_token(prev, len(ids) + j)
                drafts.append(prev)
            out.append(drafts)
        return out

    def describe(self) -> dict[str, object]:
        return {
            "runner": "recorded",
            "model": "none (simulated on the recording's clock)",
            "cost_model": self.sim.describe()["cost_model"],
        }
