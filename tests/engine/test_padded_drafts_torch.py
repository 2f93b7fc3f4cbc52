"""The torch runner and vLLM 0.33's padded decodes: a new decode scheduled as 1 + K tokens
with K placeholder drafts (-1) runs (the placeholders are fed as id 0) and samples exactly
what the unpadded decode samples; greedy outputs stay those of a run without drafts."""

from __future__ import annotations

from engine.engine import Engine
from engine.events import ListSink
from engine.outputs import PAD_DRAFT
from engine.request import SamplingParams
from engine.runner.torch_runner import TorchRunner
from tests.engine.helpers import make_config
from tests.runner.helpers import SMALL, chunk, plan, small_runner


def test_placeholder_drafts_are_fed_and_never_accepted() -> None:
    prompt = [5, 6, 7, 8, 9]
    padded, plain = small_runner("cpu"), small_runner("cpu")
    for runner in (padded, plain):
        runner.execute(plan(chunk("a", prompt[:4], 0, [1], is_new=True, sample=False)))
    out_padded = padded.execute(
        plan(chunk("a", prompt[4:], 4, [2], is_new=False, spec=[PAD_DRAFT] * 3))
    )
    out_plain = plain.execute(plan(chunk("a", prompt[4:], 4, [2], is_new=False)))
    assert out_padded.sampled_token_ids == out_plain.sampled_token_ids
    assert len(out_padded.sampled_token_ids["a"]) == 1


def _outputs(version: str, k: int) -> tuple[dict[str, list[int]], int]:
    config = make_config(
        vllm_version=version,
        num_speculative_tokens=k,
        block_size=4,
        num_gpu_blocks=64,
        max_model_len=128,
        max_num_batched_tokens=64,
    )
    sink = ListSink()
    runner = TorchRunner(config, device="cpu", preset=SMALL, seed=0, dtype="float32")
    engine = Engine(config, runner, sink)
    engine.add_request("r", [11, 12, 13, 14, 15, 16], SamplingParams(max_tokens=6))
    engine.step()
    engine.add_request("n", [21], SamplingParams(max_tokens=6))  # a one-token prompt
    padded = 0
    while engine.has_unfinished_requests():
        ev = engine.step()
        padded += sum(1 for c in ev.chunks if PAD_DRAFT in c.spec_token_ids)
    done = {
        e.req_id: e.detail["output_token_ids"]
        for e in sink.request_events()
        if e.kind == "finished"
    }
    return {r: done[r] for r in ("r", "n")}, padded


def test_greedy_outputs_are_those_without_drafts_under_0_33_padding() -> None:
    reference, _ = _outputs("0.33", 0)
    padded_run, num_padded = _outputs("0.33", 3)
    assert num_padded >= 1  # "n" was admitted as a padded decode
    assert padded_run == reference
