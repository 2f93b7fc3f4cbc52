"""Checkpoints: our logits == transformers' LlamaForCausalLM on the same weights, loaded through
`model_dir`; every broken checkpoint gives one clear CheckpointError line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.runner import make_runner
from engine.runner.checkpoint import CheckpointError
from engine.runner.tokenizer import ByteTokenizer, HFTokenizer
from engine.runner.torch_runner import TorchRunner
from tests.runner.helpers import DEVICES, chunk, engine_config, plan

transformers = pytest.importorskip("transformers")

HFDirs = dict[str, tuple[Path, Any]]


def _save_hf_model(path: Path, *, tied: bool, shard: bool) -> Any:
    cfg = transformers.LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-6,
        rope_theta=5000.0,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(1 if tied else 0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # move norms off 1.0 and enlarge weights so every part matters
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (0.2 if "norm" in name else 0.05))
    model.save_pretrained(path, max_shard_size="100KB" if shard else "1GB")
    return model


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory: pytest.TempPathFactory) -> HFDirs:
    out = {}
    for key, tied, shard in (("sharded", False, True), ("tied", True, False)):
        path = tmp_path_factory.mktemp(key)
        out[key] = (path, _save_hf_model(path, tied=tied, shard=shard))
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", ["sharded", "tied"])
def test_logits_equal_transformers_llama(hf_dirs: HFDirs, variant: str, device: str) -> None:
    path, hf = hf_dirs[variant]
    assert (path / "model.safetensors.index.json").exists() == (variant == "sharded")
    runner = TorchRunner(engine_config(), model_dir=str(path), device=device, dtype="float32")
    prompt = torch.randint(3, 512, (21,), generator=torch.Generator().manual_seed(5)).tolist()
    blocks = [9, 2, 30, 4, 17, 8, 11]  # non-contiguous, room for 28 tokens
    ours = runner.compute_logits(plan(chunk("r", prompt, 0, blocks, is_new=True)))["r"]
    with torch.no_grad():
        ref = hf(torch.tensor([prompt])).logits[0]
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=1e-4)
    seq = list(prompt)
    for _ in range(3):  # decodes through the paged cache
        seq.append(int(ours[-1].argmax()))
        step = plan(chunk("r", seq[-1:], len(seq) - 1, [], is_new=False))
        ours = runner.compute_logits(step)["r"]
        with torch.no_grad():
            ref = hf(torch.tensor([seq])).logits[0, -1:]
        torch.testing.assert_close(ours, ref, atol=1e-4, rtol=1e-4)


def _broken(src: Path, dst: Path, what: str) -> Path:
    shutil.copytree(src, dst)
    config = dst / "config.json"
    raw = json.loads(config.read_text())
    if what == "arch":
        raw.update(model_type="gpt2", architectures=["GPT2LMHeadModel"])
    elif what == "shape":
        raw["intermediate_size"] = 96
    elif what == "no_weights":
        for f in dst.glob("*.safetensors*"):
            f.unlink()
    elif what == "missing_shard":
        sorted(dst.glob("model-*.safetensors"))[0].unlink()
    elif what == "no_config":
        config.unlink()
    elif what == "corrupt":
        sorted(dst.glob("model-*.safetensors"))[0].write_bytes(b"not safetensors")
    if config.exists():
        config.write_text(json.dumps(raw))
    return dst


@pytest.mark.parametrize(
    ("what", "message"),
    [
        ("missing_dir", r"does not exist"),
        ("no_config", r"no config\.json"),
        ("arch", r"unsupported architecture 'GPT2LMHeadModel'"),
        ("no_weights", r"no \*\.safetensors weights"),
        ("missing_shard", r"shard model-00001-of-\d+\.safetensors .* is missing"),
        ("shape", r"tensor 'model\.layers\.\d+\.mlp\.\w+_proj\.weight' has shape \[\d+, \d+\]"),
        ("corrupt", r"not a readable safetensors file"),
    ],
)
def test_checkpoint_errors_are_one_clear_line(
    hf_dirs: HFDirs, tmp_path: Path, what: str, message: str
) -> None:
    src = hf_dirs["sharded"][0]
    path = tmp_path / "nope" if what == "missing_dir" else _broken(src, tmp_path / what, what)
    with pytest.raises(CheckpointError, match=message) as info:
        make_runner("torch", engine_config(), model_dir=str(path), device="cpu")
    assert isinstance(info.value, ValueError)
    assert "\n" not in str(info.value)


def test_tokenizer_json_in_checkpoint_is_used(hf_dirs: HFDirs, tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    path = shutil.copytree(hf_dirs["tied"][0], tmp_path / "ck")
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "hello": 3, "world": 4}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path / "tokenizer.json"))
    runner = TorchRunner(engine_config(), model_dir=str(path), device="cpu")
    assert isinstance(runner.tokenizer, HFTokenizer)
    assert runner.tokenizer.encode("hello world") == [1, 3, 4]
    assert runner.tokenizer.decode([3, 4]) == "hello world"
    no_tok = TorchRunner(engine_config(), model_dir=str(hf_dirs["tied"][0]), device="cpu")
    assert isinstance(no_tok.tokenizer, ByteTokenizer)
