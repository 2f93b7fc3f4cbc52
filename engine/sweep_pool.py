"""Running a sweep: every point in parallel worker processes (spawned, one per core by
default), each outcome collected as it finishes. A point that fails, or whose worker
dies, fails alone; a stop (Ctrl-C, SIGTERM, `should_stop`) lets running points finish.
The points and what one run does are engine.sweep's.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from typing import Any

from engine.sweep import Knob, PointResult, SweepPoint, plan_points, point_scenario, run_point

POOL_RESTARTS = 3
"""A pool whose worker died is started again this often for the points it never ran;
after that they fail (a point that kills its worker each time fails in the end)."""


def _run_point_safely(
    base: Mapping[str, Any], point: SweepPoint, runner: str, cost_model: str | None
) -> PointResult:
    try:
        return run_point(base, point, runner, cost_model)
    except Exception as exc:  # one bad point must not sink the sweep
        return PointResult(point, error=f"{type(exc).__name__}: {exc}")


STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _ignore_stop_signals() -> None:
    """Worker initializer: Ctrl-C and a group SIGTERM (a terminal's, systemd's) are the
    parent's to handle (it lets running points finish and keeps them); a worker killed
    mid-point would lose its point, and a broken pool would fail every point not yet run.
    The worker was started with them blocked (`_spawning`): one that came while it was
    starting is dropped here, once ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


@contextlib.contextmanager
def _spawning() -> Iterator[None]:
    """Workers are started (in this thread) with the stop signals blocked, which they
    inherit: a stop while a worker is still starting cannot kill it before its
    initializer ignores them (that would break the pool: a hang or failed points)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def run_sweep(
    base: Mapping[str, Any],
    knobs: list[Knob],
    repeat: int = 1,
    runner: str = "sim",
    cost_model: str | None = None,
    workers: int | None = None,
    on_result: Callable[[PointResult, int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> list[PointResult]:
    """Every point, in parallel worker processes (one per core by default). Results come
    back in point order. On KeyboardInterrupt, or once `should_stop()` (polled about
    twice a second) is true, no further point starts; the running ones finish and
    everything finished is returned."""
    points = plan_points(knobs, repeat)
    for point in points:
        point_scenario(base, point)  # validate every point before any runs
    workers = max(1, min(workers or os.cpu_count() or 1, len(points)))
    done: dict[int, PointResult] = {}

    def collect(res: PointResult) -> None:
        done[res.point.index] = res
        if on_result:
            on_result(res, len(done), len(points))

    if workers == 1:
        try:
            for point in points:
                if should_stop and should_stop():
                    break
                collect(_run_point_safely(base, point, runner, cost_model))
        except KeyboardInterrupt:
            pass
        return [done[i] for i in sorted(done)]
    todo = points
    for restart in range(POOL_RESTARTS + 1):
        todo = _run_in_pool(
            base, todo, runner, cost_model, workers, collect, should_stop, restart < POOL_RESTARTS
        )
        if not todo or (should_stop and should_stop()):
            break
    return [done[i] for i in sorted(done)]


def _run_in_pool(
    base: Mapping[str, Any],
    points: list[SweepPoint],
    runner: str,
    cost_model: str | None,
    workers: int,
    collect: Callable[[PointResult], None],
    should_stop: Callable[[], bool] | None,
    retry_broken: bool,
) -> list[SweepPoint]:
    """Run `points` in one pool of workers, collecting each outcome. With `retry_broken`,
    the points a broken pool never ran (a worker died: killed, out of memory, or hit by
    a stop signal while it was still starting, before it could ignore it) are returned
    to run again, not failed; a KeyboardInterrupt or `should_stop()` returns none."""
    with _spawning():  # (a spawn pool starts its workers at submit, in this thread)
        pool = ProcessPoolExecutor(
            max_workers=workers, mp_context=get_context("spawn"), initializer=_ignore_stop_signals
        )
        futures = {pool.submit(_run_point_safely, base, p, runner, cost_model): p for p in points}
    broken: list[SweepPoint] = []
    taken: set[Future[PointResult]] = set()
    stopped = False

    def take(fut: Future[PointResult]) -> None:
        taken.add(fut)
        if retry_broken and isinstance(fut.exception(), BrokenProcessPool):
            broken.append(futures[fut])
        else:
            collect(_outcome(fut, futures[fut]))

    try:
        pending: set[Future[PointResult]] = set(futures)
        while pending and not (should_stop and should_stop()):
            finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for fut in finished:
                take(fut)
    except KeyboardInterrupt:
        stopped = True
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    for fut in futures:  # points that were running when the sweep stopped
        if fut.done() and not fut.cancelled() and fut not in taken:
            take(fut)
    return [] if stopped else sorted(broken, key=lambda p: p.index)


def _outcome(fut: Future[PointResult], point: SweepPoint) -> PointResult:
    """A finished future's result; a worker that died (say, killed for memory) fails its
    point, not the sweep."""
    exc = fut.exception()
    if exc is not None:
        return PointResult(point, error=f"{type(exc).__name__}: {exc}")
    return fut.result()
