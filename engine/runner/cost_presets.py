"""Cost-model presets for real model × GPU pairs, each with its source: the published
single-request (concurrency 1) figures the roofline's efficiencies are fitted on, or, where
nothing was published for the pair, the preset whose fit it borrows, said so.

Plain data only; engine.runner.cost_model turns a preset into a RooflineCostModel. How a
fit reads a published point (the same step equation the SimRunner then uses):
- ITL (ms) of a lone decode at context C: one step of 1 token at position C is memory-bound,
  so mbu = (weight + KV bytes) / (bandwidth × (ITL − launch)).
- TTFT (ms) of a lone prompt of P tokens: one prefill step of P tokens is compute-bound,
  so mfu = FLOPs / (peak × (TTFT − launch)).
A tensor-parallel group (TP n) is one device of n × the peak and n × the bandwidth; the
fitted efficiencies absorb what TP costs (all-reduces), so they hold only for that TP.

Sources (read 2026-12; numbers copied as published, nothing else taken from them):
- NIM: NVIDIA NIM LLM benchmarking, Performance,
  https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance (Llama-3.3-70B-Instruct,
  NIM 1.8.0, 2 × H100 80G, fp8, TP2, AIPerf). Llama-3.3-70B has Llama-3.1-70B's
  architecture (80 layers, 64 heads, 8 KV heads, 128 head dim), so it stands for it.
- MUSGRAVE: J. Musgrave, "vLLM throughput-latency sweep on NVIDIA A100",
  https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on (Llama-3.1-8B-Instruct, BF16,
  vLLM 0.23.0, 1 × A100 40GB, `vllm bench serve` random 1024 in / 128 out).
"""

from __future__ import annotations

from dataclasses import dataclass

NIM_URL = "https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance"
MUSGRAVE_URL = "https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on"
DEFAULT_MFU = 0.6
"""RooflineCostModel's default mfu: an assumption, used (and said so) where no TTFT of the
pair's GPU generation was found to fit one on."""


@dataclass(frozen=True, slots=True)
class PublishedPoint:
    """One published concurrency-1 figure: a lone request of `prompt_tokens` in and
    `output_tokens` out, its TTFT or ITL (ms)."""

    prompt_tokens: int
    output_tokens: int
    ms: float
    what: str
    """`ttft` or `itl`."""
    citation: str


@dataclass(frozen=True, slots=True)
class CostPreset:
    key: str
    """What `--cost-model`, the lab and re-runs take, `GPU:MODEL` like the rooflines."""
    gpu: str
    """A key of cost_model.GPUS (one card's datasheet)."""
    model: str
    """A key of cost_model.MODELS."""
    tp: int
    dtype: str
    """`bf16` or `fp8` (weights and KV cache)."""
    label: str
    mbu_fit: PublishedPoint | str
    """The ITL the mbu is fitted on, or the key of the preset whose mbu it borrows."""
    mfu_fit: PublishedPoint | str | None
    """The TTFT the mfu is fitted on, the key it borrows from, or None: DEFAULT_MFU."""


NIM_70B_ITL = PublishedPoint(
    500, 2000, 18.91, "itl",
    f"NVIDIA NIM 1.8.0, Llama-3.3-70B, 2×H100 fp8 TP2, 500 in / 2000 out, concurrency 1: "
    f"ITL 18.91 ms ({NIM_URL})",
)  # fmt: skip
NIM_70B_TTFT = PublishedPoint(
    5000, 500, 406.77, "ttft",
    f"NVIDIA NIM 1.8.0, Llama-3.3-70B, 2×H100 fp8 TP2, 5000 in / 500 out, concurrency 1: "
    f"TTFT 406.77 ms ({NIM_URL})",
)  # fmt: skip
MUSGRAVE_8B_ITL = PublishedPoint(
    1024, 128, 1000.0 / 75.0, "itl",
    f"J. Musgrave, vLLM 0.23.0, Llama-3.1-8B BF16, 1×A100 40GB, 1024 in / 128 out, "
    f"concurrency 1: about 75 tokens/s, i.e. ITL 13.3 ms ({MUSGRAVE_URL})",
)  # fmt: skip

H100_NIM = "h100x2-fp8:llama-3.1-70b"
A100_MUSGRAVE = "a100-40gb:llama-3.1-8b"

PRESETS: tuple[CostPreset, ...] = (
    CostPreset(
        H100_NIM, "h100", "llama-3.1-70b", 2, "fp8",
        "Llama-3.1-70B on 2×H100 SXM, FP8, TP2 (fitted on NVIDIA NIM's published TTFT and ITL)",
        NIM_70B_ITL, NIM_70B_TTFT,
    ),
    CostPreset(
        "h100x4:llama-3.1-70b", "h100", "llama-3.1-70b", 4, "bf16",
        "Llama-3.1-70B on 4×H100 SXM, BF16, TP4 (roofline; efficiencies of the NIM H100 fit)",
        H100_NIM, H100_NIM,
    ),
    CostPreset(
        "h100:llama-3.1-8b", "h100", "llama-3.1-8b", 1, "bf16",
        "Llama-3.1-8B on 1×H100 SXM, BF16 (roofline; efficiencies of the NIM H100 fit)",
        H100_NIM, H100_NIM,
    ),
    CostPreset(
        A100_MUSGRAVE, "a100-40gb", "llama-3.1-8b", 1, "bf16",
        "Llama-3.1-8B on 1×A100 40GB, BF16 (mbu fitted on a published vLLM ITL; mfu assumed)",
        MUSGRAVE_8B_ITL, None,
    ),
    CostPreset(
        "a100x4:llama-3.1-70b", "a100", "llama-3.1-70b", 4, "bf16",
        "Llama-3.1-70B on 4×A100 80GB SXM, BF16, TP4 (roofline; mbu of the A100 vLLM fit, "
        "mfu assumed)",
        A100_MUSGRAVE, None,
    ),
)  # fmt: skip

PRESETS_BY_KEY = {p.key: p for p in PRESETS}
