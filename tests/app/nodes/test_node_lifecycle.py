"""A node's session ends with the node: a producer that closes its session (a clean vLLM
stop sends a `closed` mark) is recorded as closed and shown as ended; a node that
disconnects and stays away past `node_gone_after_s` is recorded as `vanished` (no frame
is added: the producer owns the numbering), and coming back resumes its session."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from tests.app.nodes.test_ingest import _serve, _stop, _wait
from tests.conftest import TOKEN, cli, free_port


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'life.db'}"
    cli("db", "upgrade", "--database-url", url, check=True)
    return url


def _frame(session: str, seq: int, data: dict[str, Any]) -> str:
    return json.dumps({"v": 1, "type": "session", "session": session, "seq": seq, "data": data})


async def _announce(port: int, node: str, session: str, key: str | None = None) -> Any:
    ws = await websockets.connect(
        f"ws://127.0.0.1:{port}/ws/ingest", additional_headers={"Authorization": f"Bearer {TOKEN}"}
    )
    hello = {"type": "announce", "node": node, "session": session, "engine": "vllm"}
    if key:
        hello["resume_key"] = key
    await ws.send(json.dumps(hello))
    welcome = json.loads(await ws.recv())
    assert welcome["type"] == "welcome", welcome
    return ws, welcome


def _node(port: int, name: str) -> dict[str, Any]:
    nodes = httpx.get(f"http://127.0.0.1:{port}/api/nodes").json()
    return next(n for n in nodes if n["node"] == name)


def _session(port: int, session: str) -> dict[str, Any]:
    r = httpx.get(f"http://127.0.0.1:{port}/api/sessions/{session}")
    r.raise_for_status()
    return dict(r.json())


def test_a_closing_producer_ends_its_session_and_a_vanished_one_is_marked(db_url: str) -> None:
    port = free_port()
    dash = _serve(port, db_url, env={"BATCHSCOPE_NODE_GONE_AFTER_S": "1.5"})

    async def closing() -> None:
        ws, _ = await _announce(port, "clean", "s-clean")
        await ws.send(_frame("s-clean", 1, {"event": "opened", "name": "clean"}))
        await ws.send(_frame("s-clean", 2, {"event": "closed", "reason": "shutdown"}))
        await asyncio.sleep(0.3)
        await ws.close()

    async def vanishing() -> str:
        ws, welcome = await _announce(port, "gone", "s-gone")
        await ws.send(_frame("s-gone", 1, {"event": "opened", "name": "gone"}))
        await asyncio.sleep(0.3)
        await ws.close()
        return str(welcome["resume_key"])

    async def returning(key: str) -> None:
        ws, welcome = await _announce(port, "gone", "s-gone", key)
        assert welcome["last_seq"] == 1
        await ws.send(_frame("s-gone", 2, {"event": "state", "paused": False}))
        await asyncio.sleep(0.5)
        await ws.close()

    try:
        asyncio.run(closing())
        clean = _wait(lambda: (row := _session(port, "s-clean"))["ended_at"] and row)
        assert clean["end_reason"] == "closed"
        node = _node(port, "clean")
        assert node["state"] == "ended" and node["end_reason"] == "shutdown"

        key = asyncio.run(vanishing())
        assert _node(port, "gone")["state"] == "disconnected"
        gone = _wait(lambda: (row := _session(port, "s-gone"))["ended_at"] and row)
        assert gone["end_reason"] == "vanished"
        assert _node(port, "gone")["end_reason"] == "vanished"
        # The clean one is not swept again: its reason stays the producer's.
        assert _node(port, "clean")["end_reason"] == "shutdown"

        asyncio.run(returning(key))
        back = _wait(lambda: (row := _session(port, "s-gone"))["last_seq"] >= 2 and row)
        # Its frame was recorded: the session reopened (and vanished again once gone).
        assert back["last_seq"] == 2
    finally:
        _stop(dash)
