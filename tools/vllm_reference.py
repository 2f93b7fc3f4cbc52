"""Reference harness: run a batchscope scenario through the REAL vLLM 0.20.0 scheduler.

Runs in its own venv (see requirements/vllm-ref.txt), never in the project venv:

    /work/vllm-venv/bin/python tools/vllm_reference.py SCENARIO.json --out RESULT.json
    /work/vllm-venv/bin/python tools/vllm_reference.py A.json B.json ... --out-dir DIR
    /work/vllm-venv/bin/python tools/vllm_reference.py --serve   # for tools/compare_scenario.py

`--serve` keeps one process (vLLM's import takes seconds): each stdin line
`SCENARIO<TAB>OUT` is answered on stdout by `@@vllmref ok` or `@@vllmref error: ...`.

The scenario is parsed with batchscope's own `engine.scenario.parse_scenario` (pure Python),
so prompts, defaults and validation are exactly ours. The scheduler is vLLM's
`vllm.v1.core.sched.scheduler.Scheduler`, built on CPU the way vLLM's
tests/v1/core/utils.py `create_scheduler` builds it (config-only Llama model directory, one
FullAttentionSpec KV group, `cache_config.num_gpu_blocks` set by hand, no model, no GPU).
Each step mirrors `engine.simulate.run_scenario`: arrivals of step s are added in list
order, then schedule(), a hand-built ModelRunnerOutput with the scenario token rule, then
update_from_output(). The result has the shape of `engine.simulate.run_scenario`'s, without
`waiting_reasons` (ours only); `timing` is vLLM's schedule() + update_from_output().

Harness-level emulation (vLLM's scheduler has no such check): a request that could never fit
the KV pool is rejected here like batchscope rejects it; `--vllm-admission` turns that off to
show what vLLM itself does (it queues the request and stalls or thrashes). A prompt of
max_model_len tokens or more is rejected as vLLM's input processor does.
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, TypeVar

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "CRITICAL")
# The model runner is vLLM's default (0.20: V1; 0.33 here: V2, which lists resumed requests
# with the new ones); VLLM_USE_V2_MODEL_RUNNER=0/1 picks one.
# init_none_hash seeds the root block hash from PYTHONHASHSEED (random bytes if unset).
os.environ.setdefault("PYTHONHASHSEED", "0")

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import warnings  # noqa: E402

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import vllm  # noqa: E402
from vllm.config import (  # noqa: E402
    CacheConfig,
    DeviceConfig,
    ModelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

from engine.scenario import Scenario, load_scenario  # noqa: E402
from tools.vllm_drive import Driver  # noqa: E402

init_none_hash(sha256)

_MODEL_DIRS: dict[int, str] = {}


def sim_token(prev_token: int, position: int) -> int:
    """The scenario format's token rule (docs/scenarios.md)."""
    return 1 + (31 * prev_token + 17 * position) % 31999


def _model_dir(max_model_len: int) -> str:
    """A config-only tiny Llama directory (no weights, no tokenizer, no download)."""
    path = _MODEL_DIRS.get(max_model_len)
    if path is None:
        path = tempfile.mkdtemp(prefix="vllmref-model-")
        atexit.register(shutil.rmtree, path, ignore_errors=True)
        config = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "num_hidden_layers": 1,
            "vocab_size": 32000,
            "max_position_embeddings": max(max_model_len, 2048),
            "rms_norm_eps": 1e-5,
            "torch_dtype": "float32",
        }
        Path(path, "config.json").write_text(json.dumps(config))
        _MODEL_DIRS[max_model_len] = path
    return path


class RecordingScheduler(Scheduler):  # type: ignore[misc,unused-ignore]
    """vLLM's Scheduler, unchanged, except that preemptions are logged in call order
    (SchedulerOutput.preempted_req_ids is a set)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.preempt_log: list[str] = []

    def _preempt_request(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # (request, timestamp) on 0.20; 0.27+ add drop_stale_output=...: passed through.
        self.preempt_log.append(request.request_id)
        super()._preempt_request(request, *args, **kwargs)


class RecordingAsyncScheduler(RecordingScheduler, AsyncScheduler):  # type: ignore[misc,unused-ignore]
    """vLLM's AsyncScheduler (output placeholders), with the same preemption log."""


SchedulerT = TypeVar("SchedulerT", bound=Scheduler)

LATER_KNOBS = {
    "max_num_active_seqs": 0,
    "watermark": 0.0,
    "prefill_schedule_interval": 1,
    "long_prefill_token_threshold_adaptive": False,
    "cache_aware_admission_window": 0,
    "cache_aware_admission_threshold": 0.5,
}
"""Scheduler knobs of later releases, with our engine's 'off' value (max_num_active_seqs 0
is vLLM's None): passed to vLLM where its SchedulerConfig has the field."""


def later_knobs(sc: Any) -> dict[str, Any]:
    """The scenario's later-release knobs for this vLLM's SchedulerConfig; a knob set on a
    release without it is refused (vLLM would not run what the scenario asks)."""
    fields = {f.name for f in dataclasses.fields(SchedulerConfig)}
    out: dict[str, Any] = {}
    for knob, off in LATER_KNOBS.items():
        value = getattr(sc, knob, off)
        if knob in fields:
            out[knob] = (value or None) if knob == "max_num_active_seqs" else value
        elif value != off:
            raise RuntimeError(f"vLLM {vllm.__version__} has no {knob} (the scenario sets it)")
    return out


def check_release(scenario: Scenario) -> None:
    """The scenario's `vllm_version` (where our engine has one) must be this vLLM's, except
    when a release nobody modelled yet is checked against the newest modelled one
    (BATCHSCOPE_NEW_RELEASE=1: tools/vllm_matrix.py --new)."""
    if os.environ.get("BATCHSCOPE_NEW_RELEASE"):
        return
    want = getattr(scenario.config, "vllm_version", None)
    have = ".".join(str(vllm.__version__).split(".")[:2])
    if want is not None and str(want) != have:
        raise RuntimeError(f"the scenario decides as vLLM {want}; this reference is {have}")


def build_scheduler(
    scenario: Scenario,
    scheduler_cls: type[SchedulerT] = RecordingScheduler,  # type: ignore[assignment]
    async_scheduling: bool = False,
    num_spec: int | None = None,
) -> SchedulerT:
    """vLLM's scheduler for the scenario's knobs, of class `scheduler_cls` (drive() needs a
    RecordingScheduler; tools/vllm_adapter_drive.py mixes in batchscope_vllm's observer).

    tools/vllm_engine_drive.py builds it as vLLM's engine does for a node: `async_scheduling`
    set in the scheduler config the class reads (the reference's scheduler classes are
    chosen by hand and keep it off), and with `num_spec` drafts an n-gram
    SpeculativeConfig, so the scheduler's __init__ reads K from the config."""
    sc = scenario.config.scheduler
    cc = scenario.config.cache
    model_config = ModelConfig(
        model=_model_dir(sc.max_model_len),
        tokenizer=_model_dir(sc.max_model_len),
        skip_tokenizer_init=True,
        trust_remote_code=False,
        dtype="float32",
        seed=0,
        max_model_len=sc.max_model_len,
    )
    scheduler_config = SchedulerConfig(
        **later_knobs(sc),
        max_num_seqs=sc.max_num_seqs,
        max_num_batched_tokens=sc.max_num_batched_tokens,
        max_model_len=sc.max_model_len,
        long_prefill_token_threshold=sc.long_prefill_token_threshold,
        enable_chunked_prefill=sc.enable_chunked_prefill,
        policy=sc.policy.value,
        scheduler_reserve_full_isl=sc.scheduler_reserve_full_isl,
        async_scheduling=False,
        is_encoder_decoder=model_config.is_encoder_decoder,
    )
    cache_config = CacheConfig(
        block_size=cc.block_size,
        gpu_memory_utilization=0.9,
        cache_dtype="auto",
        enable_prefix_caching=cc.enable_prefix_caching,
    )
    spec: dict[str, Any] = {}
    if num_spec:
        spec["speculative_config"] = _ngram_config(model_config, num_spec)
    vllm_config = VllmConfig(
        model_config=model_config,
        scheduler_config=scheduler_config,
        cache_config=cache_config,
        # No platform plugin matches a CPU-only box with the CUDA wheel; name the device.
        device_config=DeviceConfig(device="cpu"),
        **spec,
    )
    # Set after VllmConfig's checks, which tie async scheduling to executor backends
    # this harness has none of; the scheduler reads it from here.
    vllm_config.scheduler_config.async_scheduling = async_scheduling
    kv_cache_config = KVCacheConfig(
        num_blocks=cc.num_gpu_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer"],
                FullAttentionSpec(
                    block_size=cc.block_size, num_kv_heads=1, head_size=1, dtype=torch.float32
                ),
            )
        ],
    )
    cache_config.num_gpu_blocks = cc.num_gpu_blocks
    sched_obj: SchedulerT = scheduler_cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        block_size=cc.block_size,
        log_stats=True,
        structured_output_manager=StructuredOutputManager(vllm_config),
    )
    # The n-gram drafter needs no lookahead slots: what the scheduler keeps of a
    # SpeculativeConfig for it is num_spec_tokens (spec-decode stats); drafts arrive
    # through update_draft_token_ids like vLLM's post_step delivers them.
    if not num_spec:
        sched_obj.num_spec_tokens = sc.num_speculative_tokens
    sched = sched_obj
    # VllmConfig.__post_init__ may adjust knobs; the reference must run the scenario's.
    got = vllm_config.scheduler_config
    want = {
        "max_num_seqs": sc.max_num_seqs,
        "max_num_batched_tokens": sc.max_num_batched_tokens,
        "long_prefill_token_threshold": sc.long_prefill_token_threshold,
        "enable_chunked_prefill": sc.enable_chunked_prefill,
        "policy": sc.policy.value,
        "scheduler_reserve_full_isl": sc.scheduler_reserve_full_isl,
        "async_scheduling": async_scheduling,
        "max_num_partial_prefills": 1,
        **later_knobs(sc),
    }
    for key, value in want.items():
        # Knobs a release no longer has (max_num_partial_prefills: gone by 0.33) are skipped.
        if hasattr(got, key) and getattr(got, key) != value:
            raise RuntimeError(
                f"vLLM changed scheduler_config.{key}: {getattr(got, key)!r} != {value!r}"
            )
    assert sched.max_model_len == sc.max_model_len
    assert sched.max_num_scheduled_tokens == sc.max_num_batched_tokens
    assert vllm_config.cache_config.enable_prefix_caching == cc.enable_prefix_caching
    assert sched.kv_cache_manager.block_pool.num_gpu_blocks == cc.num_gpu_blocks
    return sched


def _ngram_config(model_config: Any, num_spec: int) -> Any:
    """vLLM's SpeculativeConfig for the n-gram drafter with `num_spec` drafts (no draft
    model: nothing to load)."""
    from vllm.config import ParallelConfig, SpeculativeConfig

    return SpeculativeConfig(
        method="ngram",
        num_speculative_tokens=num_spec,
        prompt_lookup_max=4,
        prompt_lookup_min=1,
        target_model_config=model_config,
        target_parallel_config=ParallelConfig(),
    )


# Set by --vllm-admission: reject only what vLLM's input processor rejects.
VLLM_ADMISSION_ONLY = False


def _rejection_reason(scenario: Scenario, num_prompt_tokens: int, max_tokens: int) -> str | None:
    sc = scenario.config.scheduler
    cc = scenario.config.cache
    if num_prompt_tokens >= sc.max_model_len:
        # vLLM's InputProcessor: a generate prompt must be shorter than max_model_len.
        return (
            f"prompt of {num_prompt_tokens} tokens needs max_model_len > {num_prompt_tokens} "
            f"(is {sc.max_model_len})"
        )
    if VLLM_ADMISSION_ONLY:
        return None
    num_outputs = min(max_tokens, sc.max_model_len - num_prompt_tokens)
    peak_tokens = num_prompt_tokens + num_outputs - 1
    needed = -(-peak_tokens // cc.block_size)
    usable = cc.num_gpu_blocks - 1
    if needed > usable:
        return (
            f"needs {needed} KV blocks at its peak ({peak_tokens} tokens) but the pool "
            f"has {usable} usable blocks: it could never finish"
        )
    return None


def run_scenario(scenario: Scenario) -> dict[str, Any]:
    cls = (
        RecordingAsyncScheduler
        if scenario.config.scheduler.async_scheduling
        else RecordingScheduler
    )
    return drive(build_scheduler(scenario, cls), scenario)


def drive(sched: RecordingScheduler, scenario: Scenario) -> dict[str, Any]:
    """Run the scenario through `sched` step by step, in the engine loop of its mode."""
    cc = scenario.config.cache
    block_hasher = (
        get_request_block_hasher(cc.block_size, sha256) if cc.enable_prefix_caching else None
    )
    driver = Driver(sched, scenario, block_hasher, _rejection_reason)
    return driver.run(isinstance(sched, AsyncScheduler))


def serve() -> int:
    print("@@vllmref ready", flush=True)
    for line in sys.stdin:
        line = line.rstrip("\n")
        if not line:
            continue
        try:
            scenario_path, out_path = line.split("\t")
            scenario = load_scenario(scenario_path)
            check_release(scenario)
            result = run_scenario(scenario)
            Path(out_path).write_text(json.dumps(result, indent=1) + "\n")
            reply = "ok"
        except Exception as exc:
            reply = f"error: {type(exc).__name__}: {exc}".replace("\n", " ")
        print(f"@@vllmref {reply}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="*", type=Path, help="scenario JSON file(s)")
    parser.add_argument("--out", type=Path, help="result JSON (one scenario)")
    parser.add_argument(
        "--out-dir", type=Path, help="write <stem>.vllm.json per scenario here (many scenarios)"
    )
    parser.add_argument("--serve", action="store_true", help="answer 'SCENARIO<TAB>OUT' lines")
    parser.add_argument(
        "--vllm-admission",
        action="store_true",
        help="do not emulate batchscope's never-fits-the-pool rejection (vLLM would queue it)",
    )
    args = parser.parse_args(argv)
    global VLLM_ADMISSION_ONLY
    VLLM_ADMISSION_ONLY = args.vllm_admission
    if args.serve:
        return serve()
    if not args.scenarios:
        parser.error("give a scenario file (or --serve)")
    if args.out and len(args.scenarios) != 1:
        parser.error("--out takes exactly one scenario; use --out-dir for several")
    if args.out_dir:
        args.out_dir.mkdir(parents=True, exist_ok=True)
    rc = 0
    for path in args.scenarios:
        try:
            result = run_scenario(load_scenario(path))
        except Exception as exc:  # keep going over a batch; report which scenario failed
            print(f"{path}: {type(exc).__name__}: {exc}", file=sys.stderr)
            rc = 2
            if len(args.scenarios) == 1:
                raise
            continue
        text = json.dumps(result, indent=1)
        if args.out:
            args.out.write_text(text + "\n")
        elif args.out_dir:
            (args.out_dir / f"{path.stem}.vllm.json").write_text(text + "\n")
        else:
            print(text)
    print(f"vllm {vllm.__version__}: ran {len(args.scenarios)} scenario(s)", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
