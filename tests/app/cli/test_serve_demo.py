"""A first visit teaches: `batchscope serve` with its defaults (the torch runner on the
built-in model, on a CPU here) plays the demo wave, so within seconds its live session
shows what the article explains: a long prompt prefilled in chunks in the same steps as
running decodes, requests waiting for token budget or KV blocks, and a preemption
followed by the victim's recompute. The page says so in a caption that links each to
its explanation (/guide pages of docs/)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from typing import Any

import httpx
import websockets
from bs4 import BeautifulSoup

from tests.conftest import ROOT, TOKEN, free_port, wait_healthy
from tests.lifeline import die_with_us

DEADLINE_S = 240.0
"""Generous: on a shared 2-core machine the torch model's steps are slow."""


class Seen:
    """What the live session's frames showed so far."""

    def __init__(self) -> None:
        self.prompt: dict[str, int] = {}
        self.chunk_beside_decode = False
        self.waiting: set[str] = set()
        self.preempted: set[str] = set()
        self.recomputed: set[str] = set()

    def fold(self, f: dict[str, Any]) -> None:
        d = f.get("data") or {}
        if f["type"] == "request" and d.get("kind") == "arrived":
            self.prompt[d["req"]] = (d.get("detail") or {}).get("num_prompt_tokens", 0)
        if f["type"] != "iteration":
            return
        members = d["scheduled"]
        decodes = [m for m in members if m["phase"] == "decode"]
        for m in members:
            if m["phase"] != "prefill":
                continue
            if m["req"] in self.preempted and m["start"] == 0:
                self.recomputed.add(m["req"])
            whole = self.prompt.get(m["req"], 0)
            if decodes and (m["start"] > 0 or m["start"] + m["n"] < whole):
                self.chunk_beside_decode = True
        self.preempted |= {p["req"] for p in d["preempted"]}
        self.waiting |= set(d["waiting_reasons"].values()) | {d.get("waiting_default")} - {None}

    def done(self) -> bool:
        return (
            self.chunk_beside_decode
            and bool(self.waiting & {"token_budget", "kv_blocks"})
            and bool(self.recomputed)
        )


async def _watch(port: int) -> Seen:
    seen = Seen()
    async with websockets.connect(f"ws://127.0.0.1:{port}/ws/live", max_size=None) as ws:
        await ws.send(json.dumps({"type": "hello", "session": None}))
        end = time.monotonic() + DEADLINE_S
        while not seen.done() and time.monotonic() < end:
            try:
                msg = json.loads(await asyncio.wait_for(ws.recv(), 5))
            except TimeoutError:
                continue
            for f in msg if isinstance(msg, list) else [msg]:
                seen.fold(f)
    return seen


def test_serve_with_its_defaults_shows_the_articles_phenomena() -> None:
    port = free_port()
    # Only where it listens, its token and an in-memory database: runner, model and
    # workload are serve's defaults.
    cmd = [sys.executable, "-m", "app.cli", "serve", "--port", str(port),
           "--token", TOKEN, "--database-url", "sqlite://"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=die_with_us(),
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        assert wait_healthy(proc, base, 120), "serve did not start"
        seen = asyncio.run(_watch(port))
        assert seen.chunk_beside_decode, "no chunked prefill beside decodes"
        assert seen.waiting & {"token_budget", "kv_blocks"}, seen.waiting
        assert seen.recomputed, f"no recompute after a preemption (preempted {seen.preempted})"
        state = httpx.get(base + "/api/state", timeout=30).json()
        assert state["meta"]["workload"] == "demo" and state["meta"]["runner"] == "torch"
        page = BeautifulSoup(httpx.get(base + "/", timeout=30).text, "html.parser")
        caption = page.select_one("#demo-caption")
        assert caption is not None and not caption.has_attr("hidden")
        links = [a["href"] for a in caption.select("a")]
        for name in ("chunked_prefill", "waiting", "preemption"):
            assert f"/guide/{name}" in links
            r = httpx.get(base + f"/guide/{name}", timeout=30)
            assert r.status_code == 200 and "batchscope" in r.text
        assert httpx.get(base + "/guide/nope", timeout=30).status_code == 404
        # The Poisson workload, turned on, replaces the wave for the rest of the session.
        auth = {"Authorization": f"Bearer {TOKEN}"}
        spec = httpx.get(base + "/api/config", timeout=30).json()["workload"]
        assert spec["demo"] is True and spec["enabled"] is False
        r = httpx.post(base + "/api/workload", json={"enabled": True}, headers=auth, timeout=30)
        assert r.status_code == 200, r.text
        assert r.json()["workload"]["enabled"] is True and not r.json()["workload"].get("demo")
        assert httpx.get(base + "/api/state", timeout=30).json()["session"] == state["session"]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
