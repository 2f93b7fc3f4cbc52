"""A generated Mooncake-style trace with shared prefixes, as production traces have them:
a few system prompts (shared leading blocks), multi-turn conversations (each turn
extends the previous turn's blocks) and one-off requests. Ids are numbered in order of
first appearance, each id is one content (a partial last block has an id of its own),
so the trace is canonical: import -> run -> export gives it back unchanged."""

from __future__ import annotations

import json
import random
from pathlib import Path


def generate_trace(n: int, block_tokens: int, seed: int = 0) -> list[dict[str, object]]:
    rng = random.Random(seed)
    next_id = 0

    def new_ids(k: int) -> list[int]:
        nonlocal next_id
        out = list(range(next_id, next_id + k))
        next_id += k
        return out

    systems: list[list[int]] = []
    conversations: list[tuple[list[int], int]] = []  # (full blocks so far, their tokens)
    rows: list[dict[str, object]] = []
    t = 0
    for _ in range(n):
        t += int(rng.expovariate(1 / 40))
        kind = rng.random()
        if kind < 0.35 and conversations:
            # Next turn of a conversation: its full blocks, then new ones.
            i = rng.randrange(len(conversations))
            prefix, _ = conversations[i]
            extra = rng.randint(1, 3 * block_tokens)
        elif kind < 0.75:
            if not systems or rng.random() < 0.1:
                systems.append(new_ids(rng.randint(1, 3)))
                prefix = systems[-1]
            else:
                prefix = rng.choice(systems)
            extra = rng.randint(1, 2 * block_tokens)
            i = -1
        else:
            prefix, extra, i = [], rng.randint(1, 3 * block_tokens), -1
        input_length = len(prefix) * block_tokens + extra
        ids = prefix + new_ids(-(-extra // block_tokens))
        full = input_length // block_tokens
        if i >= 0:
            conversations[i] = (ids[:full], full)
        elif rng.random() < 0.3:
            conversations.append((ids[:full], full))
        rows.append(
            {
                "timestamp": t,
                "input_length": input_length,
                "output_length": rng.randint(1, 64),
                "hash_ids": ids,
            }
        )
    return rows


def write_trace(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
