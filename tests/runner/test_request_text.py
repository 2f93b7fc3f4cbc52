"""The engine records prompt and output text decoded by the runner's own tokenizer."""

from __future__ import annotations

from engine.engine import Engine
from engine.events import ListSink
from engine.request import SamplingParams
from engine.runner.sim import SimRunner
from engine.runner.torch_runner import TorchRunner
from tests.runner.helpers import SMALL, engine_config


def test_torch_runner_requests_carry_their_text() -> None:
    config = engine_config()
    runner = TorchRunner(config, device="cpu", preset=SMALL)
    sink = ListSink()
    engine = Engine(config, runner, sink)
    prompt = runner.tokenizer.encode("hello, scheduler")
    assert engine.add_request("a", prompt, SamplingParams(max_tokens=3)) is None
    while engine.has_unfinished_requests():
        engine.step()
    events = {e.kind: e for e in sink.request_events()}
    assert events["arrived"].detail["prompt_text"] == runner.tokenizer.decode(prompt)
    assert "hello, scheduler" in events["arrived"].detail["prompt_text"]
    out = events["finished"].detail
    assert out["output_text"] == runner.tokenizer.decode(out["output_token_ids"])


def test_sim_runner_has_no_tokenizer_so_ids_only() -> None:
    sink = ListSink()
    engine = Engine(engine_config(), SimRunner(), sink)
    engine.add_request("a", [5, 6, 7], SamplingParams(max_tokens=2))
    while engine.has_unfinished_requests():
        engine.step()
    assert all("prompt_text" not in e.detail for e in sink.request_events())
