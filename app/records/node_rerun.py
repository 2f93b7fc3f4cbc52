"""What a re-run takes from a real vLLM node's recording, which carries vLLM's knobs and,
instead of prompts, the chain keys of their blocks (protocol.blocks).

Knobs: those our engine has are kept; vLLM's others are dropped, and each one not at
vLLM's default (or, for `max_num_scheduled_tokens`, not equal to the batched-token
budget it normally equals) is named in the re-run's result: our engine does not model
it, so the re-run may decide otherwise where it mattered. Prompts: each distinct block
key becomes the same tokens wherever it appears, and the rest of a prompt tokens of its
own (engine.mooncake.BlockTokens), so prefix blocks share exactly where the recorded
keys share (at the keys' block size: a finer sharing was not recorded).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.config import EngineConfig
from engine.mooncake import BlockNumbering, BlockTokens, TraceRow
from protocol.blocks import PROMPT_BLOCK_TOKENS

NODE_DEFAULTS: dict[str, Any] = {
    "max_num_partial_prefills": 1,
    "max_long_partial_prefills": 1,
    "stream_interval": 1,
    "max_num_queued_reqs": None,
    "max_num_queued_tokens": None,
}
"""vLLM's defaults of the scheduler knobs our engine does not have (beside
`max_num_scheduled_tokens`, which defaults to `max_num_batched_tokens`)."""

OURS = frozenset(EngineConfig().as_dict())


def node_knobs(config: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(the knobs our engine has, with their recorded values where set; the others not at
    their default, as `name=value`)."""
    known: dict[str, Any] = {}
    flagged: list[str] = []
    for key, value in config.items():
        if key in OURS:
            if value is not None:
                known[key] = value
            continue
        if key == "max_num_scheduled_tokens":
            default = config.get("max_num_batched_tokens")
        else:
            default = NODE_DEFAULTS.get(key)
        if value not in (default, None) and not (value is False and default is None):
            flagged.append(f"{key}={value}")
    return known, flagged


class NodePrompts:
    """Prompts for a node's arrivals, from their blocks' keys."""

    def __init__(self) -> None:
        self._numbering: dict[int, BlockNumbering] = {}
        self._tokens: dict[int, BlockTokens] = {}
        self._count = 0

    def prompt(self, detail: Mapping[str, Any]) -> list[int] | None:
        """The prompt of an arrival's detail (None: it has no block keys)."""
        hashes = detail.get("prompt_block_hashes")
        num_tokens = int(detail.get("num_prompt_tokens") or 0)
        if not hashes or num_tokens <= 0:
            return None
        size = int(detail.get("prompt_block_tokens") or PROMPT_BLOCK_TOKENS)
        numbering = self._numbering.setdefault(size, BlockNumbering(size))
        tokens = self._tokens.setdefault(size, BlockTokens(size))
        ids = numbering.keyed(bytes.fromhex(h) for h in hashes)
        self._count += 1
        row = TraceRow(0, 0.0, num_tokens, 0, tuple(ids))
        return tokens.prompt(self._count, row)
