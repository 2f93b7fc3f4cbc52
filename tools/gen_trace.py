"""Generate a Mooncake-style production trace (JSONL) of any size, deterministically.

One request a line: `{"timestamp": ms, "input_length": N, "output_length": M, "hash_ids":
[...]}`; `hash_ids` name the prompt's blocks of `--block-tokens` tokens (512, Mooncake's),
one id per block (a partial last block included), numbered 0, 1, ... in order of first
appearance. The shape follows a public production trace: Poisson arrivals over
`--duration-s`, log-normal prompt lengths (median ~`--median-input`) with a tail up to
`--max-input` tokens, log-normal output lengths, and shared prefixes of two kinds: a pool
of system prompts (Zipf-popular, each request taking a leading part of one) and multi-turn
sessions (a later turn repeats an earlier turn's whole chain, then adds its own blocks).

    python tools/gen_trace.py --requests 12000 --duration-s 3600 --max-input 131072 \
        --seed 0 -o trace.jsonl

`generate_trace(...)` yields the same rows as dicts (tests and benches import it).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Iterator
from pathlib import Path


def generate_trace(
    num_requests: int = 12_000,
    duration_s: float = 3600.0,
    max_input: int = 131_072,
    median_input: int = 6_000,
    median_output: int = 250,
    max_output: int = 2_000,
    block_tokens: int = 512,
    num_prefixes: int = 40,
    seed: int = 0,
) -> Iterator[dict[str, int | list[int]]]:
    """Rows of the trace in timestamp order (see the module docstring)."""
    rng = random.Random(seed)
    next_id = 0

    def fresh(count: int) -> list[int]:
        nonlocal next_id
        ids = list(range(next_id, next_id + count))
        next_id += count
        return ids

    max_blocks = -(-max_input // block_tokens)
    # System prompts: lengths 1 .. 64 blocks, each id assigned when first used (so ids are
    # numbered in order of first appearance).
    prefix_len = [rng.randint(1, min(64, max_blocks)) for _ in range(num_prefixes)]
    prefixes: list[list[int]] = [[] for _ in range(num_prefixes)]
    weights = [1.0 / (k + 1) for k in range(num_prefixes)]
    sessions: list[list[int]] = []  # chains of earlier turns (a bounded, recent set)
    rate_per_ms = num_requests / (duration_s * 1000.0)
    t = 0.0
    sigma = 1.1
    for _ in range(num_requests):
        t += rng.expovariate(rate_per_ms)
        if rng.random() < 0.01:  # the long tail: near the longest prompt the trace allows
            n_in = rng.randint(max_input * 3 // 4, max_input)
        else:
            n_in = int(rng.lognormvariate(math.log(median_input), sigma))
        n_in = max(16, min(max_input, n_in))
        n_out = max(1, min(max_output, int(rng.lognormvariate(math.log(median_output), 0.9))))
        blocks = -(-n_in // block_tokens)
        roll = rng.random()
        ids: list[int]
        if roll < 0.3 and sessions:
            # A later turn: an earlier chain, whole, then its own blocks.
            base = sessions[rng.randrange(len(sessions))]
            ids = base + fresh(blocks - len(base)) if len(base) < blocks else fresh(blocks)
        elif roll < 0.85:
            k = rng.choices(range(num_prefixes), weights)[0]
            chain = prefixes[k]
            shared = min(prefix_len[k], blocks - 1) if blocks > 1 else 0
            if len(chain) < shared:
                chain += fresh(shared - len(chain))
            ids = chain[:shared] + fresh(blocks - shared)
        else:
            ids = fresh(blocks)
        sessions.append(ids)
        if len(sessions) > 200:
            sessions.pop(rng.randrange(len(sessions)))
        yield {
            "timestamp": int(t),
            "input_length": n_in,
            "output_length": n_out,
            "hash_ids": ids,
        }


def write_trace(path: Path | None, rows: Iterator[dict[str, int | list[int]]]) -> int:
    out = sys.stdout if path is None else path.open("w", encoding="utf-8")
    count = 0
    try:
        for row in rows:
            out.write(json.dumps(row, separators=(",", ":")) + "\n")
            count += 1
    finally:
        if path is not None:
            out.close()
    return count


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=12_000)
    ap.add_argument("--duration-s", type=float, default=3600.0)
    ap.add_argument("--max-input", type=int, default=131_072)
    ap.add_argument("--median-input", type=int, default=6_000)
    ap.add_argument("--median-output", type=int, default=250)
    ap.add_argument("--max-output", type=int, default=2_000)
    ap.add_argument("--block-tokens", type=int, default=512)
    ap.add_argument("--prefixes", type=int, default=40, help="system prompts shared")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--output", type=Path, default=None, help="file (default stdout)")
    args = ap.parse_args(argv)
    if (
        args.requests < 1
        or args.duration_s <= 0
        or args.block_tokens < 1
        or args.prefixes < 1
        or not 16 <= args.median_input <= args.max_input
        or not 1 <= args.median_output <= args.max_output
    ):
        ap.error(
            "need --requests >= 1, --duration-s > 0, --block-tokens >= 1, --prefixes >= 1, "
            "16 <= --median-input <= --max-input, 1 <= --median-output <= --max-output"
        )
    rows = generate_trace(
        args.requests,
        args.duration_s,
        args.max_input,
        args.median_input,
        args.median_output,
        args.max_output,
        args.block_tokens,
        args.prefixes,
        args.seed,
    )
    count = write_trace(args.output, rows)
    if args.output is not None:
        print(f"{count} requests -> {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
