"""protocol.tasks.cancel_and_wait ends tasks that swallow a cancellation, and never swallows the
caller's own (a stop's bound holds even against a task that will not end)."""

from __future__ import annotations

import asyncio

import pytest

from protocol.tasks import cancel_and_wait


async def _swallows(times: int, stop: asyncio.Event, ran: list[int]) -> None:
    """A loop that goes on after its first `times` cancellations, as a pull loop does when
    Python 3.11's wait_for loses a cancellation that raced a fetched batch."""
    while not stop.is_set():
        try:
            await asyncio.sleep(0.01)
            ran.append(1)
        except asyncio.CancelledError:
            if times == 0:
                raise
            times -= 1


async def test_a_task_that_swallowed_its_cancellation_is_cancelled_again() -> None:
    stop, ran = asyncio.Event(), []
    task = asyncio.create_task(_swallows(2, stop, ran))
    await asyncio.sleep(0.05)
    await asyncio.wait_for(cancel_and_wait([task], nudge_s=0.05), 30)
    assert task.cancelled()
    stop.set()


async def test_the_callers_bound_holds_against_a_task_that_never_ends() -> None:
    stop, ran = asyncio.Event(), []
    stubborn = asyncio.create_task(_swallows(10**9, stop, ran))
    await asyncio.sleep(0.05)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(cancel_and_wait([stubborn], nudge_s=0.05), 0.5)
    before = len(ran)
    await asyncio.sleep(0.1)
    assert len(ran) > before  # it did go on: only the bound ended the wait
    stop.set()
    await asyncio.wait_for(stubborn, 30)


async def test_what_the_tasks_raised_is_retrieved_and_dropped() -> None:
    async def fails() -> None:
        raise ValueError("boom")

    done = asyncio.create_task(fails())
    await asyncio.sleep(0)
    sleeper = asyncio.create_task(asyncio.sleep(60))
    await cancel_and_wait([done, sleeper])
    assert sleeper.cancelled() and isinstance(done.exception(), ValueError)
