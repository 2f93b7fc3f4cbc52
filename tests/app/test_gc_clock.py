"""GcClock turns counted collections off and collects cyclic garbage when its clock is
due, not before: the young generations each tick, the whole heap at the full tick. The
web process runs one while it serves; a simulation runs one while it drives."""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator

import httpx
import pytest

from engine.gc_clock import GcClock
from tests.conftest import start_server


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref[_Node]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture
def clocks() -> Iterator[list[GcClock]]:
    """Clocks the test starts, stopped after it (counted collections back on)."""
    started: list[GcClock] = []
    assert gc.isenabled()
    try:
        yield started
    finally:
        for clock in started:
            clock.stop()
    assert gc.isenabled()


def test_cycles_wait_for_the_clock_then_go(clocks: list[GcClock]) -> None:
    clock = GcClock(every_s=3600, full_every_s=3600)
    clocks.append(clock)
    assert not gc.isenabled()
    garbage = _cycle()
    for _ in range(100_000):  # far past the counted collector's thresholds
        _Node()
    clock.tick()
    assert garbage() is not None  # not due: nothing collected
    clock.every_s = 0.0
    clock.tick()  # a young collection: the cycle was made since the last one
    assert garbage() is None


def test_a_cycle_that_outlived_a_young_collection_goes_at_the_full_one(
    clocks: list[GcClock],
) -> None:
    clock = GcClock(every_s=0.0, full_every_s=3600)
    clocks.append(clock)
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


def test_counted_collections_stay_off_until_the_last_clock_stops(
    clocks: list[GcClock],
) -> None:
    """Two clocks of one process (a lab simulation's beside the web's), stopped in either
    order: the collector is back on only when neither runs."""
    web, lab = GcClock(), GcClock()
    clocks += [web, lab]
    web.stop()
    assert not gc.isenabled()  # the lab's still runs
    web.stop()  # a second stop counts for nothing
    assert not gc.isenabled()
    lab.stop()
    assert gc.isenabled()
    inner = GcClock()
    clocks.append(inner)
    gc.enable()  # someone turned it on meanwhile: a new clock turns it off again
    outer = GcClock()
    clocks.append(outer)
    assert not gc.isenabled()
    outer.stop()
    assert not gc.isenabled()


def test_the_web_process_collects_on_its_clock_while_it_serves() -> None:
    """A real server (uvicorn on loopback, in this process): counted collections are off
    while it serves, so no full collection comes from allocating; the young generations
    go on its clock; counted collections are back once it stops."""
    assert gc.isenabled()
    live, server, thread = start_server()
    try:
        assert httpx.get(live.url + "/healthz", timeout=30).status_code == 200
        assert not gc.isenabled()
        full = gc.get_stats()[2]["collections"]
        kept = [_Node() for _ in range(300_000)]  # far past the counted thresholds
        assert gc.get_stats()[2]["collections"] == full
        del kept
        garbage = _cycle()
        deadline = time.monotonic() + 60
        while garbage() is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert garbage() is None, "the server's clock collected nothing in 60 s"
    finally:
        server.should_exit = True
        thread.join(30)
    assert not thread.is_alive()
    assert gc.isenabled()
