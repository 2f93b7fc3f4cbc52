"""GcClock turns counted collections off and collects cyclic garbage when its clock is
due, not before: the young generations each tick, the whole heap at the full tick."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from app.gc_clock import GcClock


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref[_Node]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture
def restore_gc() -> Iterator[None]:
    was = gc.isenabled()
    try:
        yield
    finally:
        if was:
            gc.enable()


@pytest.mark.usefixtures("restore_gc")
def test_cycles_wait_for_the_clock_then_go() -> None:
    clock = GcClock(every_s=3600, full_every_s=3600)
    assert not gc.isenabled()
    garbage = _cycle()
    for _ in range(100_000):  # far past the counted collector's thresholds
        _Node()
    clock.tick()
    assert garbage() is not None  # not due: nothing collected
    clock.every_s = 0.0
    clock.tick()  # a young collection: the cycle was made since the last one
    assert garbage() is None


@pytest.mark.usefixtures("restore_gc")
def test_a_cycle_that_outlived_a_young_collection_goes_at_the_full_one() -> None:
    clock = GcClock(every_s=0.0, full_every_s=3600)
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    clock.tick()  # young collection while the cycle is still held: it moves to the oldest
    garbage = weakref.ref(a)
    del a, b
    clock.tick()
    assert garbage() is not None  # young collections do not walk the oldest generation
    clock.full_every_s = 0.0
    clock.tick()
    assert garbage() is None
