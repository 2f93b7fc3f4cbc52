"""Step-time models for the SimRunner: the roofline (with the GEMM-saturation knee the
article's section 7 describes) and presets for common GPUs and models.

Per step, with T = scheduled + padding tokens and each chunk i of n_i tokens starting at
position s_i:

    compute = 2 * params * T + 4 * layers * q_dim * sum_i n_i * (s_i + n_i / 2)   [FLOPs]
    memory  = weight bytes + kv_bytes_per_token * sum_i (s_i + n_i)               [bytes]
    step_ms = launch_ms + max(compute / (peak_flops * mfu), memory / (bandwidth * mbu))

Small batches are memory-bound (every step streams the weights once, whatever the batch),
so adding tokens is nearly free until compute takes over: the knee sits near
T = peak * weight_bytes / (2 * params * bandwidth) (about 300 tokens for bf16 on an H100).

Two kinds of preset, each labelled with where its numbers come from (preset_catalog):
published ones (engine.runner.cost_presets: real model × GPU pairs, TP and dtype said, the
efficiencies fitted on published TTFT/ITL figures) and the plain rooflines `GPU:MODEL`
(datasheet peaks × this module's assumed efficiencies).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from typing_extensions import TypedDict

from engine.outputs import SchedulerOutput
from engine.runner.cost_presets import (
    DEFAULT_MFU,
    PRESETS,
    PRESETS_BY_KEY,
    CostPreset,
    PublishedPoint,
)
from engine.runner.sim import CostModel, StepCost

StepCostModel = CostModel | StepCost
"""What SimRunner takes: the linear CostModel or a model with estimate_ms()."""


@dataclass(frozen=True, slots=True)
class GPUSpec:
    name: str
    peak_flops: float
    """Dense BF16 tensor-core FLOP/s (no sparsity)."""
    bandwidth: float
    """HBM bytes/s."""
    source: str
    peak_flops_fp8: float = 0.0
    """Dense FP8 tensor-core FLOP/s; 0: no FP8 tensor cores."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    num_params: float
    num_layers: int
    q_dim: int
    """num_heads * head_dim."""
    kv_dim: int
    """num_kv_heads * head_dim."""
    bytes_per_param: int


# Public spec sheets (dense BF16, no sparsity; HBM bandwidth of the SXM parts).
GPUS: dict[str, GPUSpec] = {
    "a100": GPUSpec(
        "A100 SXM4 80GB", 312e12, 2.039e12, "NVIDIA A100 datasheet: 312 TFLOPS BF16, 2,039 GB/s"
    ),
    "a100-40gb": GPUSpec(
        "A100 SXM4 40GB", 312e12, 1.555e12, "NVIDIA A100 datasheet: 312 TFLOPS BF16, 1,555 GB/s"
    ),
    "h100": GPUSpec(
        "H100 SXM5 80GB",
        989e12,
        3.35e12,
        "NVIDIA H100 datasheet: 989 TFLOPS BF16 dense, 1,979 TFLOPS FP8 dense, 3.35 TB/s",
        1979e12,
    ),
    "h200": GPUSpec(
        "H200 SXM 141GB",
        989e12,
        4.8e12,
        "NVIDIA H200 datasheet: 989 TFLOPS BF16 dense, 1,979 TFLOPS FP8 dense, 4.8 TB/s",
        1979e12,
    ),
    "l4": GPUSpec(
        "L4 24GB", 121e12, 0.3e12, "NVIDIA L4 datasheet: 121 TFLOPS BF16 dense, 300 GB/s"
    ),
}

# Architectures from the models' config.json; the built-ins from engine.runner.model.
MODELS: dict[str, ModelSpec] = {
    "llama-3-8b": ModelSpec("Llama-3-8B", 8.03e9, 32, 32 * 128, 8 * 128, 2),
    "llama-3-70b": ModelSpec("Llama-3-70B", 70.6e9, 80, 64 * 128, 8 * 128, 2),
    "llama-3.1-8b": ModelSpec("Llama-3.1-8B", 8.03e9, 32, 32 * 128, 8 * 128, 2),
    "llama-3.1-70b": ModelSpec("Llama-3.1-70B", 70.6e9, 80, 64 * 128, 8 * 128, 2),
    "qwen3-8b": ModelSpec("Qwen3-8B", 8.19e9, 36, 32 * 128, 8 * 128, 2),
    "tiny": ModelSpec("tiny (built-in, fp32)", 19.3e6, 4, 8 * 32, 4 * 32, 4),
    "medium": ModelSpec("medium (built-in, bf16)", 349e6, 24, 16 * 64, 8 * 64, 2),
}


@dataclass(frozen=True, slots=True)
class RooflineCostModel:
    num_params: float
    num_layers: int
    q_dim: int
    kv_dim: int
    bytes_per_param: int
    peak_flops: float
    bandwidth: float
    launch_ms: float = 0.05
    mfu: float = 0.6
    """Fraction of peak FLOP/s a real forward reaches when compute-bound."""
    mbu: float = 0.8
    """Fraction of peak bandwidth reached when memory-bound."""
    name: str = ""
    source: str = ""
    """Where the numbers come from (a preset's citations and fit), for people."""

    @property
    def kv_bytes_per_token(self) -> float:
        return 2 * self.num_layers * self.kv_dim * self.bytes_per_param

    def step_parts(
        self, chunks: Sequence[tuple[int, int]], padding: int = 0
    ) -> tuple[float, float]:
        """(FLOPs, bytes) of one forward over chunks given as (start, num_tokens)."""
        tokens = sum(n for _, n in chunks) + padding
        attn = sum(n * (s + n / 2) for s, n in chunks)
        flops = 2 * self.num_params * tokens + 4 * self.num_layers * self.q_dim * attn
        context = sum(s + n for s, n in chunks)
        nbytes = self.num_params * self.bytes_per_param + self.kv_bytes_per_token * context
        return flops, nbytes

    def chunks_ms(self, chunks: Sequence[tuple[int, int]], padding: int = 0) -> float:
        if not chunks:
            return 0.0
        flops, nbytes = self.step_parts(chunks, padding)
        compute_s = flops / (self.peak_flops * self.mfu)
        memory_s = nbytes / (self.bandwidth * self.mbu)
        return self.launch_ms + max(compute_s, memory_s) * 1000.0

    def estimate_ms(self, output: SchedulerOutput) -> float:
        return self.chunks_ms(
            [(c.num_computed_before, c.num_tokens) for c in output.chunks],
            output.num_padding_tokens,
        )

    def knee_tokens(self) -> float:
        """Tokens per step where compute time overtakes the weight read (decode at short
        context)."""
        weight_s = self.num_params * self.bytes_per_param / (self.bandwidth * self.mbu)
        return weight_s * self.peak_flops * self.mfu / (2 * self.num_params)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": "roofline", **asdict(self)}


ASSUMED = "roofline (theoretical peak × efficiency E: mfu 0.6, mbu 0.8, this project's assumed "
ASSUMED += "efficiencies, not fitted on any published figure)"


def roofline_preset(gpu: str, model: str) -> RooflineCostModel:
    if gpu not in GPUS:
        raise ValueError(f"unknown GPU {gpu!r} (choose {', '.join(sorted(GPUS))})")
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r} (choose {', '.join(sorted(MODELS))})")
    g, m = GPUS[gpu], MODELS[model]
    return RooflineCostModel(
        m.num_params,
        m.num_layers,
        m.q_dim,
        m.kv_dim,
        m.bytes_per_param,
        g.peak_flops,
        g.bandwidth,
        name=f"{g.name} / {m.name}",
        source=f"{ASSUMED}; {g.source}",
    )


# ------------------------------------------------------------ published presets
def _peak_roofline(preset: CostPreset) -> RooflineCostModel:
    """The pair at 100% of its datasheet peaks (mfu = mbu = 1), TP n as one device."""
    g, m = GPUS[preset.gpu], MODELS[preset.model]
    fp8 = preset.dtype == "fp8"
    peak = g.peak_flops_fp8 if fp8 else g.peak_flops
    return RooflineCostModel(
        m.num_params,
        m.num_layers,
        m.q_dim,
        m.kv_dim,
        1 if fp8 else 2,
        peak * preset.tp,
        g.bandwidth * preset.tp,
        mfu=1.0,
        mbu=1.0,
    )


def _fit_mbu(peak: RooflineCostModel, point: PublishedPoint) -> float:
    """A lone decode at the request's mean context: bytes over bandwidth × (ITL − launch)."""
    context = point.prompt_tokens + point.output_tokens // 2
    _, nbytes = peak.step_parts([(context, 1)])
    return nbytes / (peak.bandwidth * (point.ms - peak.launch_ms) / 1000.0)


def _fit_mfu(peak: RooflineCostModel, point: PublishedPoint) -> float:
    """A lone prefill of the prompt in one step: FLOPs over peak × (TTFT − launch)."""
    flops, _ = peak.step_parts([(0, point.prompt_tokens)])
    return flops / (peak.peak_flops * (point.ms - peak.launch_ms) / 1000.0)


def _efficiencies(preset: CostPreset) -> tuple[float, float, list[str]]:
    """(mfu, mbu, how each was found) of a published preset."""
    peak = _peak_roofline(preset)
    notes: list[str] = []
    if isinstance(preset.mbu_fit, PublishedPoint):
        mbu = _fit_mbu(peak, preset.mbu_fit)
        notes.append(f"mbu {mbu:.3f} fitted on {preset.mbu_fit.citation}")
    else:
        mbu = _efficiencies(PRESETS_BY_KEY[preset.mbu_fit])[1]
        notes.append(f"mbu {mbu:.3f} taken from the fit of preset {preset.mbu_fit}")
    if isinstance(preset.mfu_fit, PublishedPoint):
        mfu = _fit_mfu(peak, preset.mfu_fit)
        notes.append(f"mfu {mfu:.3f} fitted on {preset.mfu_fit.citation}")
    elif preset.mfu_fit is not None:
        mfu = _efficiencies(PRESETS_BY_KEY[preset.mfu_fit])[0]
        notes.append(f"mfu {mfu:.3f} taken from the fit of preset {preset.mfu_fit}")
    else:
        mfu = DEFAULT_MFU
        notes.append(
            f"mfu {mfu} assumed (this project's default; no published TTFT of this GPU "
            "generation was found to fit one on)"
        )
    return mfu, mbu, notes


def published_preset(key: str) -> RooflineCostModel:
    """A preset of engine.runner.cost_presets as a roofline, its efficiencies fitted."""
    preset = PRESETS_BY_KEY[key]
    mfu, mbu, notes = _efficiencies(preset)
    g = GPUS[preset.gpu]
    kind = (
        "fitted on published figures"
        if not isinstance(preset.mbu_fit, str)
        else "not measured for this pair"
    )
    source = (
        f"{kind}: roofline (theoretical peak × efficiency E) of {preset.tp}× {g.name} "
        f"({g.source}) as one device, {preset.dtype}; " + "; ".join(notes)
    )
    return replace(_peak_roofline(preset), mfu=mfu, mbu=mbu, name=preset.label, source=source)


class PresetInfo(TypedDict):
    key: str
    label: str
    source: str
    published: bool
    """Fitted on (or borrowing from) published figures; False: a plain assumed roofline."""


def preset_catalog() -> list[PresetInfo]:
    """Every preset with its label and source: the published pairs first."""
    out: list[PresetInfo] = []
    for p in PRESETS:
        model = published_preset(p.key)
        out.append({"key": p.key, "label": p.label, "source": model.source, "published": True})
    for g, m in _plain_pairs():
        roof = roofline_preset(g, m)
        label = f"{roof.name} (roofline, assumed efficiencies)"
        out.append({"key": f"{g}:{m}", "label": label, "source": roof.source, "published": False})
    return out


def _plain_pairs() -> list[tuple[str, str]]:
    """Every GPU × model roofline whose name no published preset takes (one that does,
    e.g. h100:llama-3.1-8b, is that preset)."""
    return [(g, m) for g in GPUS for m in MODELS if f"{g}:{m}" not in PRESETS_BY_KEY]


def preset_names() -> list[str]:
    return [p.key for p in PRESETS] + [f"{g}:{m}" for g, m in _plain_pairs()]


def describe_cost_model(spec: str) -> PresetInfo:
    """What to show beside a cost model's name: a preset's label and source, or for a
    file, the file (raises ValueError for an unknown preset or a bad file)."""
    model = load_cost_model(spec)
    if isinstance(model, RooflineCostModel) and spec in preset_names():
        return {
            "key": spec,
            "label": model.name,
            "source": model.source,
            "published": spec in PRESETS_BY_KEY,
        }
    label = f"cost model file {spec}"
    source = model.source if isinstance(model, RooflineCostModel) else ""
    return {"key": spec, "label": label, "source": source or "calibrate", "published": False}


def load_cost_model(spec: str) -> StepCostModel:
    """A preset `GPU:MODEL` (e.g. `h100:llama-3-8b`), or a JSON file written by
    `batchscope calibrate` (a roofline with "kind": "roofline", else the linear model)."""
    if spec.lower() in PRESETS_BY_KEY:
        return published_preset(spec.lower())
    if ":" in spec and not Path(spec).exists():
        gpu, _, model = spec.partition(":")
        return roofline_preset(gpu.lower(), model.lower())
    try:
        data = json.loads(Path(spec).read_text())
    except OSError as exc:
        raise ValueError(f"cost model {spec!r}: cannot read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"cost model {spec!r}: not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise ValueError(f"cost model {spec!r}: must be a JSON object")
    kind = data.pop("kind", "linear")
    data.pop("runner", None)  # calibrate's note of the runner it measured
    cls: Any = RooflineCostModel if kind == "roofline" else CostModel
    names = {f.name for f in fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"cost model {spec!r}: unknown field {sorted(unknown)[0]!r}")
    try:
        model = cls(**data)
    except TypeError as exc:
        raise ValueError(f"cost model {spec!r}: {exc}") from None
    return model  # type: ignore[no-any-return]
