"""JSON with bounds: a size limit and a nesting limit, so that a hostile document is a
clear error, never a RecursionError deep inside the parser, a model or an encoder."""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 32
"""Deeper than anything our protocol or API uses (frames nest 4 levels)."""


class JsonRefused(ValueError):
    """Not JSON, or JSON beyond the bounds (the message says which)."""


def depth_exceeds(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether `value` nests deeper than `limit` containers (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def loads(text: str | bytes, max_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    """Parse JSON within the bounds; raises JsonRefused with a message for the client."""
    if len(text) > max_bytes:
        raise JsonRefused(f"message too large (over {max_bytes} bytes)")
    try:
        value = json.loads(text)
    except RecursionError:
        raise JsonRefused(f"JSON nested deeper than {max_depth} levels") from None
    except ValueError as exc:
        raise JsonRefused(f"not valid JSON ({exc})") from None
    if depth_exceeds(value, max_depth):
        raise JsonRefused(f"JSON nested deeper than {max_depth} levels")
    return value
