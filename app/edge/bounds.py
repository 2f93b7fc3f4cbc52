"""Bounded parameter types for routes: what a database column can hold, checked by FastAPI
at the edge (a clear 422), never an OverflowError or an out-of-range error from a driver."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

INT32_MAX = 2**31 - 1

StepQuery = Annotated[
    int | None, Query(ge=-1, le=INT32_MAX, description="a step (-1: before the first)")
]
"""`?step=K`: a step of a recording (-1 is the state before the first step)."""

IndexPath = Annotated[int, Path(ge=0, le=INT32_MAX, description="a position from 0")]
"""`/{index}` in a path: a stored position (a sweep's point)."""


def is_clean_id(value: object, max_length: int = 128) -> bool:
    """A session id a client may name: a string of printable characters (no NUL or other
    control characters, which some databases refuse), 1 to `max_length` long."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= max_length
        and not any(ord(c) < 32 or ord(c) == 127 for c in value)
    )
