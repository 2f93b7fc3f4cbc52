"""Real uvicorn + real websockets: snapshot first, ordered frames, gaps for stalled clients."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import threading
import time
from typing import Any
from urllib.parse import quote

import pytest
import websockets
from websockets.typing import Origin

from app.frames.validate import validate_frame
from tests.conftest import LiveServer, server_process


async def _hello(ws: Any, session: str | None = None) -> dict[str, Any]:
    await ws.send(json.dumps({"type": "hello", "session": session, "last_seq": None}))
    snap: dict[str, Any] = json.loads(await ws.recv())
    return snap


async def _frames(ws: Any, timeout: float = 5.0) -> list[dict[str, Any]]:
    msg = json.loads(await asyncio.wait_for(ws.recv(), timeout))
    return msg if isinstance(msg, list) else [msg]


def _inject(live: LiveServer, n: int, prompt_len: int = 40, max_tokens: int = 30) -> None:
    with live.client() as c:
        r = c.post(
            "/api/requests", json={"prompt_len": prompt_len, "max_tokens": max_tokens, "count": n}
        )
        assert r.status_code == 201, r.text


async def test_snapshot_then_frames_in_seq_order_without_gaps(live_server: LiveServer) -> None:
    async with websockets.connect(live_server.ws_url + "/ws/live") as ws:
        snap = await _hello(ws)
        assert snap["type"] == "snapshot" and snap["data"]["session"] == snap["session"]
        last = snap["seq"]
        await asyncio.to_thread(_inject, live_server, 6)
        seen_types: set[str] = set()
        steps: list[int] = []
        while len(steps) < 30:
            for frame in await _frames(ws):
                assert frame["seq"] == last + 1
                last = frame["seq"]
                seen_types.add(frame["type"])
                if frame["type"] in ("iteration", "request", "config"):
                    validate_frame(frame["type"], frame["data"])
                if frame["type"] == "iteration":
                    steps.append(frame["data"]["step"])
        assert steps == list(range(steps[0], steps[0] + len(steps)))
        assert {"iteration", "request"} <= seen_types


async def test_a_stalled_client_gets_gap_and_snapshot_while_others_keep_going() -> None:
    # Its own process: the engine, the hub and this test's clients do not share a GIL.
    # A paced engine (its own process reaches the pace): the reading client keeps up,
    # with room for a loaded box's stalls (two suites side by side stalled the reader or
    # the server's loop past a 1 s staleness and past a 256-frame queue); the stalled
    # client overruns any room: it never reads. A stalled tab still answers pings (its
    # browser's network stack does); this client cannot while it never reads, so the
    # keepalive waits longer than the stall can last on a loaded box.
    with server_process(
        ws_queue_frames=2048, ws_stale_after_s=5, sim_speed=2, ws_ping_interval_s=600
    ) as live:
        await _stalled_client_scenario(live)


def _raw_ws_hello(port: int) -> socket.socket:
    """A websocket client at the socket level: handshake, send hello, then never read.
    Its tiny receive buffer makes the server's writes back up, like a stalled tab."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        f"GET /ws/live HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    _send_raw(sock, 0x1, json.dumps({"type": "hello", "session": None, "last_seq": None}))
    return sock


def _send_raw(sock: socket.socket, opcode: int, payload: str | bytes) -> None:
    """One masked, unfragmented client frame (payloads under 126 bytes)."""
    data = payload.encode() if isinstance(payload, str) else payload
    assert len(data) < 126
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
    sock.sendall(bytes([0x80 | opcode, 0x80 | len(data)]) + mask + masked)


class _RawFrames:
    """The server's websocket frames as a socket-level client reads them."""

    def __init__(self, sock: socket.socket, timeout_s: float) -> None:
        sock.setblocking(True)
        sock.settimeout(timeout_s)
        self.sock = sock
        self.buf = b""

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            assert chunk, "connection closed"
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def next(self) -> tuple[int, bool, bytes]:
        """(opcode, final fragment, payload) of the next frame."""
        b0, b1 = self._exact(2)
        length = b1 & 0x7F
        if length == 126:
            length = int.from_bytes(self._exact(2), "big")
        elif length == 127:
            length = int.from_bytes(self._exact(8), "big")
        return b0 & 0x0F, bool(b0 & 0x80), self._exact(length)


def _close_code(payload: bytes) -> int | None:
    return int.from_bytes(payload[:2], "big") if payload else None


async def _read_raw_frames(sock: socket.socket, until_seq: int) -> tuple[bool, int]:
    """Read the stalled client's backlog: (saw a gap frame, last seq seen)."""
    frames = _RawFrames(sock, 10)
    saw_gap, last = False, 0
    message = b""
    while last < until_seq:
        opcode, fin, payload = await asyncio.to_thread(frames.next)
        if opcode == 0x8:
            code = _close_code(payload)
            raise AssertionError(f"the server closed the stalled client: {code} {payload[2:]!r}")
        if opcode == 0x9:  # ping: answered, as any client does once it reads
            _send_raw(sock, 0xA, payload)
            continue
        if opcode == 0xA:
            continue
        message += payload
        if not fin:  # a fragment: the message continues in the next frame
            continue
        data, message = json.loads(message), b""
        for frame in data if isinstance(data, list) else [data]:
            if frame["type"] == "gap":
                saw_gap = True
            elif frame["type"] == "snapshot":
                last = frame["seq"]
            else:
                assert frame["seq"] == last + 1
                last = frame["seq"]
    return saw_gap, last


def test_a_client_that_stops_answering_pings_is_closed() -> None:
    # A viewer whose machine went away holds no resources for long: the keepalive the
    # setting names closes it (1011), and the server serves on.
    with server_process(ws_ping_interval_s=1) as live:
        sock = _raw_ws_hello(int(live.url.rsplit(":", 1)[1]))
        frames = _RawFrames(sock, 30)
        pings = 0
        start = time.monotonic()
        while True:
            opcode, _, payload = frames.next()
            pings += opcode == 0x9
            if opcode == 0x8:
                break
        took = time.monotonic() - start
        sock.close()
        # Closed in ~2 s; uvicorn's own keepalive (20 s + 20 s) takes 40.
        assert took < 30, took
        assert pings >= 1
        assert _close_code(payload) == 1011, payload
        with live.client() as c:
            assert c.get("/healthz").status_code == 200


async def _stalled_client_scenario(live: LiveServer) -> None:
    slow = await asyncio.to_thread(_raw_ws_hello, int(live.url.rsplit(":", 1)[1]))
    async with websockets.connect(live.ws_url + "/ws/live") as fast:
        await _hello(fast)
        # Wide batches make big frames (~10 KB), so the stall shows within seconds even
        # through the kernel's socket buffers.
        with live.client() as c:
            r = c.post("/api/config", json={"max_num_batched_tokens": 4096, "max_num_seqs": 128})
            assert r.status_code == 200

        # Injected beside the reading, not between reads: on a loaded box each POST can
        # take a second, and a client that does not read meanwhile falls behind for real.
        def inject_all() -> None:
            for _ in range(4):
                _inject(live, 32, 30, 900)

        injector = threading.Thread(target=inject_all, daemon=True)
        injector.start()
        fast_last = 0
        fast_frames = 0
        finished = 0
        while finished < 128:
            for frame in await _frames(fast):
                assert frame["type"] != "gap", ("the fast client fell behind", fast_frames)
                if fast_last:
                    assert frame["seq"] == fast_last + 1
                fast_last = frame["seq"]
                fast_frames += 1
                if frame["type"] == "request" and frame["data"]["kind"] == "finished":
                    finished += 1
    injector.join(120)
    # Now drain the stalled client: it was told about the gap and handed a fresh
    # snapshot, after which its stream is gap-free again up to the end.
    saw_gap, last = await _read_raw_frames(slow, fast_last)
    slow.close()
    assert saw_gap
    assert last >= fast_last
    with live.client() as c:
        assert c.get("/api/state").json()["step"] > 800
    assert fast_frames > 1000


async def test_foreign_origin_is_refused(live_server: LiveServer) -> None:
    with pytest.raises(websockets.InvalidStatus) as info:
        async with websockets.connect(
            live_server.ws_url + "/ws/live", origin=Origin("http://evil.example")
        ):
            pass
    assert info.value.response.status_code == 403


async def test_the_client_must_say_hello_first(live_server: LiveServer) -> None:
    async with websockets.connect(live_server.ws_url + "/ws/live") as ws:
        await ws.send(json.dumps({"type": "subscribe"}))
        with pytest.raises(websockets.ConnectionClosed) as info:
            await ws.recv()
        assert info.value.rcvd is not None and info.value.rcvd.code == 1002


async def test_a_hello_in_the_url_gets_the_snapshot_without_a_message(
    live_server: LiveServer,
) -> None:
    hello = json.dumps({"type": "hello", "session": None, "last_seq": None, "rows": "columns"})
    url = live_server.ws_url + "/ws/live?hello=" + quote(hello)
    async with websockets.connect(url) as ws:
        snap = json.loads(await asyncio.wait_for(ws.recv(), 5))
        assert snap["type"] == "snapshot" and "ts" in snap
        assert snap["data"]["requests"]["columns"][0] == "req"
    async with websockets.connect(live_server.ws_url + "/ws/live?hello=%7Bnot%20json") as ws:
        with pytest.raises(websockets.ConnectionClosed) as info:
            await ws.recv()
        assert info.value.rcvd is not None and info.value.rcvd.code == 1002
