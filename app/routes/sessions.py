"""Recorded sessions: list, rename, delete, state at a step, re-run and compare."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from sqlalchemy.orm import Session, sessionmaker

from app.db import queries
from app.forms import FormError, parse_config_changes
from app.live.hub import EventHub
from app.protocol.convert import event_to_frame
from app.protocol.session import new_session_id, session_meta
from app.protocol.state import SessionState
from app.records.rerun import load_arrivals, rerun_events
from app.routes.api import body_of
from app.security import require_control, require_view
from engine.config import ConfigError, EngineConfig

router = APIRouter(prefix="/api")
Control = [Depends(require_control)]
View = [Depends(require_view)]


def _db(request: Request) -> sessionmaker[Session]:
    db: sessionmaker[Session] = request.app.state.db
    return db


def _hub(request: Request) -> EventHub:
    hub: EventHub = request.app.state.hub
    return hub


def _not_found(exc: queries.NotFound) -> HTTPException:
    return HTTPException(404, str(exc))


@router.get("/sessions", dependencies=View)
async def list_sessions(request: Request, q: str | None = None) -> list[dict[str, Any]]:
    def load() -> list[dict[str, Any]]:
        with _db(request)() as db:
            return queries.list_sessions(db, q)

    rows = await asyncio.to_thread(load)
    hub = _hub(request)
    known = {r["id"] for r in rows}
    for row in rows:
        info = hub.sessions.get(row["id"])
        row["live"] = bool(info and info.live)
    needle = (q or "").lower()
    for sid, info in hub.sessions.items():
        label = f"{sid} {info.meta.get('name', '')} {info.meta.get('source', '')}".lower()
        if sid not in known and info.live and needle in label:
            rows.insert(
                0,
                {
                    "id": sid,
                    "name": info.meta.get("name", ""),
                    "live": True,
                    "source": info.meta.get("source", ""),
                    "steps": info.state.step + 1,
                    "requests": len(info.state.requests),
                    "started_at": info.meta.get("started_at", time.time()),
                },
            )
    return rows


@router.get("/sessions/{session_id}", dependencies=View)
async def get_session(session_id: str, request: Request) -> dict[str, Any]:
    def load() -> dict[str, Any]:
        with _db(request)() as db:
            return queries.get_session(db, session_id)

    try:
        return await asyncio.to_thread(load)
    except queries.NotFound as exc:
        raise _not_found(exc) from None


@router.patch("/sessions/{session_id}", dependencies=Control)
async def rename(session_id: str, request: Request) -> dict[str, Any]:
    data = await body_of(request)
    name = data.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise HTTPException(422, "name: 1 to 200 characters")

    def write() -> None:
        with _db(request).begin() as db:
            queries.rename_session(db, session_id, name.strip())

    try:
        await asyncio.to_thread(write)
    except queries.NotFound as exc:
        raise _not_found(exc) from None
    return {"id": session_id, "name": name.strip()}


@router.delete("/sessions/{session_id}", dependencies=Control)
async def delete(session_id: str, request: Request) -> dict[str, Any]:
    info = _hub(request).sessions.get(session_id)
    if info is not None and info.live:
        raise HTTPException(409, "this session is live; stop it before deleting its recording")

    def write() -> None:
        with _db(request).begin() as db:
            queries.delete_session(db, session_id)

    try:
        await asyncio.to_thread(write)
    except queries.NotFound as exc:
        raise _not_found(exc) from None
    _hub(request).sessions.pop(session_id, None)
    return {"deleted": session_id}


@router.get("/sessions/{session_id}/state", dependencies=View)
async def state_at(session_id: str, request: Request, step: int | None = None) -> dict[str, Any]:
    def load() -> dict[str, Any]:
        with _db(request)() as db:
            meta = queries.get_session(db, session_id)
            target = meta["steps"] - 1 if step is None else step
            return queries.state_at_step(db, session_id, target).snapshot()

    try:
        return await asyncio.to_thread(load)
    except queries.NotFound as exc:
        raise _not_found(exc) from None


@router.post("/sessions/{session_id}/rerun", dependencies=Control)
async def rerun(session_id: str, request: Request) -> dict[str, Any]:
    data = await body_of(request)
    runner = str(data.pop("runner", "sim") or "sim")
    if runner not in ("sim", "torch"):
        raise HTTPException(422, "runner: must be sim or torch")
    name = str(data.pop("name", "") or "")[:200]

    def load() -> tuple[dict[str, Any], Any]:
        with _db(request)() as db:
            return load_arrivals(db, session_id)

    try:
        meta, arrivals = await asyncio.to_thread(load)
        base = EngineConfig().with_updates(**meta["config"]) if meta["config"] else EngineConfig()
        changes = parse_config_changes(data, rerun=True) if data else {}
        config = base.with_updates(**changes)
    except queries.NotFound as exc:
        raise _not_found(exc) from None
    except FormError as exc:
        raise HTTPException(422, str(exc)) from None
    except ConfigError as exc:
        raise HTTPException(422, f"{exc.field}: {exc.message}") from None
    if not arrivals:
        raise HTTPException(422, "this recording has no re-runnable arrivals")
    events = await asyncio.to_thread(rerun_events, config, arrivals, runner)
    hub = _hub(request)
    new_id = new_session_id()
    label = name or f"rerun of {meta['name'] or session_id}: " + (
        ", ".join(f"{k}={v}" for k, v in changes.items()) or "same knobs"
    )
    meta = session_meta(
        label,
        "rerun",
        runner=runner,
        simulated=runner == "sim",
        config=config.as_dict(),
        rerun_of=session_id,
    )
    hub.open_session(new_id, meta, live=False)
    for event in events:
        frame_type, frame = event_to_frame(event)
        if frame_type != "engine_snapshot":
            hub.publish(new_id, frame_type, frame)
    hub.close_session(new_id)
    await request.app.state.recorder.flush()
    return {"session": new_id, "name": label, "steps": hub.sessions[new_id].state.step + 1}


@router.get("/compare", dependencies=View)
async def compare(a: str, b: str, request: Request) -> dict[str, Any]:
    def load(session_id: str) -> tuple[dict[str, Any], SessionState]:
        with _db(request)() as db:
            meta = queries.get_session(db, session_id)
            return meta, queries.state_at_step(db, session_id, meta["steps"] - 1)

    try:
        (ma, sa), (mb, sb) = await asyncio.to_thread(load, a), await asyncio.to_thread(load, b)
    except queries.NotFound as exc:
        raise _not_found(exc) from None
    left, right = summary(ma, sa), summary(mb, sb)
    diff = {k: _delta(left[k], right[k]) for k in left if isinstance(left[k], int | float)}
    return {"a": left, "b": right, "diff": diff}


def summary(meta: dict[str, Any], state: SessionState) -> dict[str, Any]:
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


def _delta(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    return round(b - a, 6)
