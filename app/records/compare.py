"""Two recordings side by side: each one's summary at its last step, and B - A."""

from __future__ import annotations

import asyncio
from typing import cast

from sqlalchemy.orm import Session, sessionmaker

from app.db import queries
from app.frames.fold import SessionState
from app.records.compare_setup import setup_difference
from app.records.compare_types import ComparisonData, SessionSummary, SetupData


def summary(meta: queries.SessionRow, state: SessionState) -> SessionSummary:
    lat = state.latency_summary()
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
        "config": state.config or meta["config"],
    }


def _delta(a: float, b: object) -> float | None:
    if not isinstance(b, int | float):
        return None
    return round(b - a, 6)


async def compare_sessions(db: sessionmaker[Session], a: str, b: str) -> ComparisonData:
    """`{a, b, diff, setup}`: the summaries, B - A of every number, and every difference
    between the two setups (app.records.compare_setup). Raises NotFound."""

    def load(session_id: str) -> tuple[queries.SessionRow, SessionState]:
        with db() as s:
            meta = queries.get_session(s, session_id)
            return meta, queries.state_at_step(s, session_id, meta["steps"] - 1)

    def load_setup() -> SetupData:
        with db() as s:
            return setup_difference(s, a, b)

    (ma, sa), (mb, sb) = await asyncio.to_thread(load, a), await asyncio.to_thread(load, b)
    setup = await asyncio.to_thread(load_setup)
    left, right = summary(ma, sa), summary(mb, sb)
    lv, rv = cast(dict[str, object], left), cast(dict[str, object], right)
    diff = {k: _delta(v, rv[k]) for k, v in lv.items() if isinstance(v, int | float)}
    return {"a": left, "b": right, "diff": diff, "setup": setup}
