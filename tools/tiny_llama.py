"""Write a tiny random Llama checkpoint that `vllm serve` loads, made entirely offline.

    python tools/tiny_llama.py OUT_DIR [--seed 0] [--vocab 1024]

OUT_DIR gets config.json, generation_config.json, model.safetensors (hidden 128, 2 layers,
4 heads of 32 (vLLM's CPU attention has no head size 16), 2 KV heads, MLP 256, float32) and
a byte-level BPE tokenizer trained here with `tokenizers` on generated text (tokenizer.json,
tokenizer_config.json, special_tokens_map.json) that transformers' AutoTokenizer loads.
Deterministic: the same seed writes the same bytes. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, MLP = 128, 2, 4, 2, 32, 256
MAX_POSITIONS = 2048
BOS, EOS, PAD = "<s>", "</s>", "<pad>"
TEXT = (
    "the a an of to in on at by for with from scheduler batch token prefill decode request "
    "queue block cache page memory kernel step chunk budget wait run finish preempt resume "
    "model layer head attention prompt output sample greedy fast slow small large first last "
    "red green blue cat dog tree river stone cloud light night day time year world people "
    "water fire earth wind city road house door window book story song paper number value"
)
WORDS = TEXT.split()


def corpus(seed: int, lines: int = 4000) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 16))]
        if rng.random() < 0.3:
            words.append(str(rng.randint(0, 9999)))
        out.append(" ".join(words).capitalize() + rng.choice(".!?,;:"))
    return out


def write_tokenizer(out: Path, seed: int, vocab: int) -> tuple[int, dict[str, int]]:
    """Train and save the tokenizer; its size and the special tokens' ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=[BOS, EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    tok.save(str(out / "tokenizer.json"))
    specials = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}
    config = {
        **specials,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": MAX_POSITIONS,
        "clean_up_tokenization_spaces": False,
        "chat_template": (
            "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}"
        ),
    }
    _dump(out / "tokenizer_config.json", config)
    _dump(out / "special_tokens_map.json", specials)
    ids = {f"{k}_id": tok.token_to_id(v) for k, v in specials.items()}
    return tok.get_vocab_size(), {k: v for k, v in ids.items() if v is not None}


def write_weights(out: Path, seed: int, vocab: int) -> None:
    import torch
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.05

    kv = KV_HEADS * HEAD_DIM
    tensors = {"model.embed_tokens.weight": rand(vocab, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        tensors |= {
            p + "self_attn.q_proj.weight": rand(HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.k_proj.weight": rand(kv, HIDDEN),
            p + "self_attn.v_proj.weight": rand(kv, HIDDEN),
            p + "self_attn.o_proj.weight": rand(HIDDEN, HEADS * HEAD_DIM),
            p + "mlp.gate_proj.weight": rand(MLP, HIDDEN),
            p + "mlp.up_proj.weight": rand(MLP, HIDDEN),
            p + "mlp.down_proj.weight": rand(HIDDEN, MLP),
            p + "input_layernorm.weight": torch.ones(HIDDEN),
            p + "post_attention_layernorm.weight": torch.ones(HIDDEN),
        }
    tensors["model.norm.weight"] = torch.ones(HIDDEN)
    tensors["lm_head.weight"] = rand(vocab, HIDDEN) * 20  # peaked logits: varied greedy text
    save_file(
        {k: v.contiguous() for k, v in tensors.items()},
        str(out / "model.safetensors"),
        metadata={"format": "pt"},
    )


def write_tiny_llama(out: Path, seed: int = 0, vocab: int = 1024) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    size, ids = write_tokenizer(out, seed, vocab)
    if size != vocab:
        raise SystemExit(f"tokenizer reached {size} tokens, not {vocab}")
    _dump(
        out / "config.json",
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": HIDDEN,
            "intermediate_size": MLP,
            "num_hidden_layers": LAYERS,
            "num_attention_heads": HEADS,
            "num_key_value_heads": KV_HEADS,
            "head_dim": HEAD_DIM,
            "hidden_act": "silu",
            "max_position_embeddings": MAX_POSITIONS,
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "tie_word_embeddings": False,
            "torch_dtype": "float32",
            "vocab_size": vocab,
            **ids,
        },
    )
    _dump(out / "generation_config.json", ids)
    write_weights(out, seed, vocab)
    return out


def _dump(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocab", type=int, default=1024)
    args = parser.parse_args()
    print(write_tiny_llama(args.out, args.seed, args.vocab))


if __name__ == "__main__":
    main()
