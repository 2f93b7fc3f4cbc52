"""Two recordings side by side: each one's summary at its last step, and B - A."""

from __future__ import annotations

import asyncio
from typing import cast

from sqlalchemy.orm import Session, sessionmaker

from app.db import queries
from app.records.compare_setup import setup_difference
from app.records.compare_types import ComparisonData, SessionSummary, SetupData
from protocol.views import LatencySummary
from protocol.wire import Knobs


def summary(meta: queries.SessionRow, lat: LatencySummary, config: Knobs) -> SessionSummary:
    """A recording's row of the comparison: its latency summary `lat` at its last step,
    its knobs there (`config`; else those it started with)."""
    return {
        "session": meta["id"],
        "name": meta["name"],
        "steps": lat["steps"],
        "finished": lat["finished"],
        "throughput_tok_s": lat["throughput_tok_s"],
        "ttft_p50": lat["ttft"]["p50"],
        "ttft_p99": lat["ttft"]["p99"],
        "itl_p50": lat["itl"]["p50"],
        "itl_p99": lat["itl"]["p99"],
        "e2e_p50": lat["e2e"]["p50"],
        "e2e_p99": lat["e2e"]["p99"],
        "preemptions": lat["preemptions"],
        "kv_peak": lat["kv_peak"],
        "config": config or meta["config"],
    }


def _delta(a: float, b: object) -> float | None:
    if not isinstance(b, int | float):
        return None
    return round(b - a, 6)


async def compare_sessions(db: sessionmaker[Session], a: str, b: str) -> ComparisonData:
    """`{a, b, diff, setup}`: the summaries, B - A of every number, and every difference
    between the two setups (app.records.compare_setup). Raises NotFound."""

    def load(session_id: str) -> SessionSummary:
        with db() as s:
            meta = queries.get_session(s, session_id)
            state = queries.state_at_step(s, session_id, meta["steps"] - 1)
            return summary(meta, state.latency_summary(), state.config)

    def load_setup() -> SetupData:
        with db() as s:
            return setup_difference(s, a, b)

    left, right = await asyncio.to_thread(load, a), await asyncio.to_thread(load, b)
    setup = await asyncio.to_thread(load_setup)
    lv, rv = cast(dict[str, object], left), cast(dict[str, object], right)
    diff = {k: _delta(v, rv[k]) for k, v in lv.items() if isinstance(v, int | float)}
    return {"a": left, "b": right, "diff": diff, "setup": setup}
