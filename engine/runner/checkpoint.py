"""Load a local Llama-family checkpoint: `config.json` + `*.safetensors` (sharded or not).

Nothing is ever downloaded. Every failure is one `CheckpointError` line that names the
problem: a missing directory or file, an unsupported architecture, a tensor whose shape
does not match `config.json`, a missing or unexpected tensor.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from engine.runner.model import LlamaModel, ModelConfig, empty_model

INDEX_FILE = "model.safetensors.index.json"


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded; the message says why, in one line."""


def read_model_config(model_dir: str | Path) -> ModelConfig:
    """`config.json` -> ModelConfig, refusing anything but a Llama decoder."""
    root = Path(model_dir)
    if not root.is_dir():
        raise CheckpointError(f"model dir {root} does not exist or is not a directory")
    path = root / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{root}: no config.json (expected a Llama-family checkpoint)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: cannot read ({exc})") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: must be a JSON object")
    archs = raw.get("architectures") or []
    if raw.get("model_type") != "llama" or (archs and "LlamaForCausalLM" not in archs):
        found = ", ".join(archs) if archs else raw.get("model_type")
        raise CheckpointError(
            f"{path}: unsupported architecture {found!r} (only model_type 'llama' / "
            "LlamaForCausalLM is supported)"
        )
    if raw.get("hidden_act", "silu") != "silu":
        raise CheckpointError(f"{path}: unsupported hidden_act {raw['hidden_act']!r} (need silu)")
    try:
        heads = int(raw["num_attention_heads"])
        hidden = int(raw["hidden_size"])
        cfg = ModelConfig(
            name=root.name,
            vocab_size=int(raw["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(raw["intermediate_size"]),
            num_layers=int(raw["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(raw.get("num_key_value_heads") or heads),
            head_dim=int(raw.get("head_dim") or hidden // heads),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=_rope_theta(raw),
            rope_scaling=_rope_scaling(raw, path),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            attention_bias=bool(raw.get("attention_bias", False)),
            mlp_bias=bool(raw.get("mlp_bias", False)),
            bos_token_id=raw.get("bos_token_id"),
            eos_token_ids=_eos_ids(raw.get("eos_token_id")),
        )
    except KeyError as exc:
        raise CheckpointError(f"{path}: missing key {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: bad value ({exc})") from None
    if cfg.num_heads % cfg.num_kv_heads:
        raise CheckpointError(
            f"{path}: num_attention_heads must be a multiple of num_key_value_heads"
        )
    return cfg


def _rope_theta(raw: dict[str, Any]) -> float:
    # transformers >= 5 writes rope_parameters; older configs have top-level rope_theta.
    params = raw.get("rope_parameters") or {}
    return float(params.get("rope_theta", raw.get("rope_theta", 10000.0)))


def _rope_scaling(raw: dict[str, Any], path: Path) -> dict[str, Any] | None:
    scaling = raw.get("rope_scaling") or raw.get("rope_parameters") or {}
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type in (None, "default"):
        return None
    if rope_type != "llama3":
        raise CheckpointError(f"{path}: unsupported rope type {rope_type!r} (default or llama3)")
    keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    return {"rope_type": "llama3", **{k: float(scaling[k]) for k in keys}}


def _eos_ids(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    return tuple(int(v) for v in value) if isinstance(value, list) else (int(value),)


def checkpoint_files(model_dir: str | Path) -> list[Path]:
    """The safetensors files: those the shard index names, else every *.safetensors."""
    root = Path(model_dir)
    index = root / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{index}: cannot read the shard index ({exc})") from None
        files = [root / name for name in sorted(set(weight_map.values()))]
        for f in files:
            if not f.is_file():
                raise CheckpointError(f"{root}: shard {f.name} named in {INDEX_FILE} is missing")
        return files
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{root}: no *.safetensors weights (only safetensors are loaded)")
    return files


def load_checkpoint(model_dir: str | Path, device: torch.device, dtype: torch.dtype) -> LlamaModel:
    """Build the model from `config.json` and copy every tensor in, checking names and shapes."""
    from safetensors import SafetensorError, safe_open

    cfg = read_model_config(model_dir)
    files = checkpoint_files(model_dir)
    model = empty_model(cfg, device, dtype)
    params = dict(model.named_parameters())  # a tied lm_head appears once, as embed_tokens
    loaded: set[str] = set()
    for path in files:
        try:
            handle = safe_open(str(path), framework="pt", device="cpu")
        except (SafetensorError, OSError) as exc:
            raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from None
        with handle as f, torch.no_grad():
            for name in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                param = params.get(name)
                if param is None:
                    if name.endswith("rotary_emb.inv_freq") or (
                        name == "lm_head.weight" and cfg.tie_word_embeddings
                    ):
                        continue
                    raise CheckpointError(
                        f"{path.name}: unexpected tensor {name!r} for a {cfg.num_layers}-layer "
                        "Llama model"
                    )
                shape = list(f.get_slice(name).get_shape())
                if shape != list(param.shape):
                    raise CheckpointError(
                        f"{path.name}: tensor {name!r} has shape {shape} but config.json "
                        f"implies {list(param.shape)}"
                    )
                param.copy_(f.get_tensor(name))
                loaded.add(name)
    missing = [name for name in params if name not in loaded]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CheckpointError(f"{Path(model_dir)}: missing tensor {missing[0]!r}{more}")
    return model
