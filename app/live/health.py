"""Health: each component reports into one registry, and /healthz asks them all.

A component registers a `HealthSource` (anything with `health()`) or a plain function;
either returns a `Check`, directly or awaited. /healthz runs every check concurrently,
each bounded by a timeout (a hung check reports as not ok; it never hangs the probe),
and answers 503 with the reasons when any is not ok.

Registered today (app.main): `engine` (the local engine; on a dashboard without one, the
nodes it observes), `recorder` (frames not yet in the database, including the batch
being written, and how old the oldest is), `database` (a round trip), `relay`.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

CHECK_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    detail: str
    """One line: what is wrong, or what is fine."""
    info: Mapping[str, Any] = field(default_factory=dict)
    """Numbers behind it (JSON-ready)."""


class HealthSource(Protocol):
    def health(self) -> Check | Awaitable[Check]: ...


HealthFn = Callable[[], Check | Awaitable[Check]]


@dataclass(frozen=True, slots=True)
class HealthReport:
    ok: bool
    checks: dict[str, Check]

    @property
    def reason(self) -> str | None:
        """`name: detail` of every failing check, or None when healthy."""
        bad = [f"{name}: {c.detail}" for name, c in self.checks.items() if not c.ok]
        return "; ".join(bad) or None


class HealthRegistry:
    def __init__(self, timeout_s: float = CHECK_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._checks: dict[str, HealthFn] = {}

    def register(self, name: str, source: HealthSource | HealthFn) -> None:
        """Add (or replace) the check called `name`."""
        fn = source.health if not callable(source) else source
        self._checks[name] = fn  # type: ignore[assignment]

    @property
    def names(self) -> list[str]:
        return list(self._checks)

    async def report(self) -> HealthReport:
        names = list(self._checks)
        results = await asyncio.gather(*(self._run(self._checks[n]) for n in names))
        checks = dict(zip(names, results, strict=True))
        return HealthReport(all(c.ok for c in checks.values()), checks)

    async def _run(self, fn: HealthFn) -> Check:
        try:
            result = fn()
            if inspect.isawaitable(result):
                result = await asyncio.wait_for(result, self.timeout_s)
            assert isinstance(result, Check)
            return result
        except TimeoutError:
            return Check(False, f"no answer within {self.timeout_s:g} s")
        except Exception as exc:
            return Check(False, f"check failed: {type(exc).__name__}: {exc}")


async def database_check(ping: Callable[[], None], timeout_s: float) -> Check:
    """`ping` (a blocking round trip, e.g. SELECT 1) in a worker thread."""
    try:
        await asyncio.wait_for(asyncio.to_thread(ping), timeout_s)
    except TimeoutError:
        return Check(False, f"no answer from the database within {timeout_s:g} s")
    except Exception as exc:
        return Check(False, f"unreachable: {type(exc).__name__}: {exc}".splitlines()[0])
    return Check(True, "reachable")
