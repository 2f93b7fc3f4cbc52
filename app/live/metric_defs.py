"""vLLM 0.20's Prometheus metric definitions, as vllm/v1/metrics/loggers.py and
vllm/v1/spec_decode/metrics.py declare them: names, help texts, bucket boundaries and the
label values vLLM always exports. app.live.metrics fills them from frames.

Names are the *declared* names: Prometheus clients add `_total` to counters and
`_bucket`/`_sum`/`_count` to histograms, so `vllm:prompt_tokens` is scraped as
`vllm:prompt_tokens_total`, which is what vLLM's Grafana dashboards query.
"""

from __future__ import annotations

LABELS = ("model_name", "engine")
"""Every vLLM engine metric's labels: the served model's name, and which engine. Ours:
the node's name for an ingested node, LOCAL_ENGINE for the dashboard's own engine; both
stay the same from session to session (the session is `batchscope:engine_session_info`)."""
LOCAL_ENGINE = "local"
"""`engine` of the dashboard's own engine process (the node name it is registered under)."""

FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
"""vllm.v1.engine.FinishReason: every value is exported (0 until it happens)."""
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
"""vllm.v1.metrics.stats.PromptTokenStats.ALL_SOURCES."""
CACHED_SOURCE = "device"
"""`vllm:prompt_tokens_cached_by_source{source}`: our prefix cache is GPU memory."""
WAITING_REASONS = ("capacity", "deferred")
DEFERRED_REASONS = frozenset({"paused"})
"""Our waiting reasons that are vLLM's `deferred` (held back by a transient state, not
by capacity); every other reason is `capacity`."""
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
CACHE_INFO_LABELS = (
    "block_size", "num_gpu_blocks", "enable_prefix_caching", "cache_dtype", "num_cpu_blocks",
)  # fmt: skip
"""`vllm:cache_config_info`'s labels besides `engine`: the CacheConfig fields we know."""


def build_1_2_5_buckets(max_value: int) -> list[float]:
    """1, 2, 5, 10, 20, 50, ... up to max_value (vLLM's build_1_2_5_buckets)."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(value)
        exponent += 1


TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
    7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
N_BUCKETS = (1, 2, 5, 10, 20)
KV_RESIDENCY_BUCKETS = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120,
    300, 600, 1200, 1800,
)  # fmt: skip

LEN = "max_model_len"
"""A histogram whose buckets are build_1_2_5_buckets(max_model_len)."""

HISTOGRAMS: dict[str, tuple[str, tuple[float, ...] | str]] = {
    "vllm:iteration_tokens_total": (
        "Histogram of number of tokens per engine_step.",
        ITERATION_TOKEN_BUCKETS,
    ),
    "vllm:time_to_first_token_seconds": (
        "Histogram of time to first token in seconds.",
        TTFT_BUCKETS,
    ),
    "vllm:inter_token_latency_seconds": (
        "Histogram of inter-token latency in seconds.",
        ITL_BUCKETS,
    ),
    "vllm:request_time_per_output_token_seconds": (
        "Histogram of time_per_output_token_seconds per request.",
        ITL_BUCKETS,
    ),
    "vllm:e2e_request_latency_seconds": (
        "Histogram of e2e request latency in seconds.",
        REQUEST_LATENCY_BUCKETS,
    ),
    "vllm:request_queue_time_seconds": (
        "Histogram of time spent in WAITING phase for request.",
        REQUEST_LATENCY_BUCKETS,
    ),
    "vllm:request_inference_time_seconds": (
        "Histogram of time spent in RUNNING phase for request.",
        REQUEST_LATENCY_BUCKETS,
    ),
    "vllm:request_prefill_time_seconds": (
        "Histogram of time spent in PREFILL phase for request.",
        REQUEST_LATENCY_BUCKETS,
    ),
    "vllm:request_decode_time_seconds": (
        "Histogram of time spent in DECODE phase for request.",
        REQUEST_LATENCY_BUCKETS,
    ),
    "vllm:request_prompt_tokens": ("Number of prefill tokens processed.", LEN),
    "vllm:request_generation_tokens": ("Number of generation tokens processed.", LEN),
    "vllm:request_max_num_generation_tokens": (
        "Histogram of maximum number of requested generation tokens.",
        LEN,
    ),
    "vllm:request_params_n": ("Histogram of the n request parameter.", N_BUCKETS),
    "vllm:request_params_max_tokens": ("Histogram of the max_tokens request parameter.", LEN),
    "vllm:request_prefill_kv_computed_tokens": (
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        LEN,
    ),
    "vllm:kv_block_lifetime_seconds": (
        "Histogram of KV cache block lifetime from allocation to eviction.",
        KV_RESIDENCY_BUCKETS,
    ),
    "vllm:kv_block_idle_before_evict_seconds": (
        "Histogram of idle time before KV cache block eviction.",
        KV_RESIDENCY_BUCKETS,
    ),
    "vllm:kv_block_reuse_gap_seconds": (
        "Histogram of time gaps between consecutive KV cache block accesses.",
        KV_RESIDENCY_BUCKETS,
    ),
}

COUNTERS: dict[str, str] = {
    "vllm:num_preemptions": "Cumulative number of preemption from the engine.",
    "vllm:prompt_tokens": "Number of prefill tokens processed.",
    "vllm:prompt_tokens_cached": "Number of cached prompt tokens (local + external).",
    "vllm:generation_tokens": "Number of generation tokens processed.",
    "vllm:prefix_cache_queries": "Prefix cache queries, in terms of number of queried tokens.",
    "vllm:prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
    "vllm:external_prefix_cache_queries": (
        "External prefix cache queries from KV connector cross-instance cache sharing, "
        "in terms of number of queried tokens."
    ),
    "vllm:external_prefix_cache_hits": (
        "External prefix cache hits from KV connector cross-instance cache sharing, "
        "in terms of number of cached tokens."
    ),
    "vllm:mm_cache_queries": "Multi-modal cache queries, in terms of number of queried items.",
    "vllm:mm_cache_hits": "Multi-modal cache hits, in terms of number of cached items.",
    "vllm:spec_decode_num_drafts": "Number of spec decoding drafts.",
    "vllm:spec_decode_num_draft_tokens": "Number of draft tokens.",
    "vllm:spec_decode_num_accepted_tokens": "Number of accepted tokens.",
}

LABELLED_COUNTERS: dict[str, tuple[str, str]] = {
    "vllm:request_success": ("Count of successfully processed requests.", "finished_reason"),
    "vllm:prompt_tokens_by_source": ("Number of prompt tokens by source.", "source"),
    "vllm:prompt_tokens_cached_by_source": (
        "Number of cached prompt tokens by the tier that held them.",
        "source",
    ),
    "vllm:spec_decode_num_accepted_tokens_per_pos": (
        "Accepted tokens per draft position.",
        "position",
    ),
}
"""name: (help, the extra label)."""

GAUGES: dict[str, str] = {
    "vllm:num_requests_running": "Number of requests in model execution batches.",
    "vllm:num_requests_waiting": "Number of requests waiting to be processed.",
    "vllm:kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
}
