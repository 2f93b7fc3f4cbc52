"""Observed real nodes: a `batchscope serve --no-engine` dashboard on loopback (SQLite), bursts
of completions to a `vllm serve` whose scheduler is batchscope_vllm.ObservedScheduler, and
what the dashboard recorded of them, next to vLLM's own /metrics.

Requests are told apart by the id vLLM reports: each completion is sent with an
`X-Request-Id` header (TAG-i), vLLM answers `cmpl-TAG-i` and schedules it as
`cmpl-TAG-i-0-<8 random hex>` (the prompt index, then the suffix vLLM adds so ids are
unique), which is the id the adapter records. Shared by tests/vllm_node and
bench/vllm_node_bench.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.db.models import SessionRecord
from app.db.queries import iter_frames
from app.db.session import make_engine
from tests.conftest import ROOT, TOKEN, free_port
from tests.lifeline import die_with_us
from tests.vllm_node.conftest import VllmNode, parse_metrics

OBSERVED = ("--scheduler-cls", "batchscope_vllm.ObservedScheduler")
COUNTERS = (
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
)
REASONS = ("length", "stop", "abort")


def wait_for(what: str, fn: Callable[[], Any], timeout: float = 60.0, every: float = 0.25) -> Any:
    """Poll `fn` until it returns something truthy (returned); AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        with contextlib.suppress(httpx.HTTPError, KeyError, IndexError, OSError):
            last = fn()
            if last:
                return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {last!r})")
        time.sleep(every)


# ---------------------------------------------------------------- the dashboard
@dataclass
class Dashboard:
    """`batchscope serve --no-engine` in its own process, recording into a SQLite file."""

    url: str
    db_url: str
    proc: subprocess.Popen[bytes]
    log: Path
    _db: Engine | None = field(default=None, repr=False)

    def db(self) -> Engine:
        """A reader of the recording (one engine, reused)."""
        if self._db is None:
            self._db = make_engine(self.db_url)
        return self._db

    @property
    def ingest(self) -> str:
        return self.url.replace("http://", "ws://") + "/ws/ingest"

    def node_env(self, node: str) -> dict[str, str]:
        """The environment that makes an ObservedScheduler node push here as `node`."""
        return {"BATCHSCOPE_URL": self.ingest, "BATCHSCOPE_TOKEN": TOKEN, "BATCHSCOPE_NODE": node}

    def nodes(self) -> dict[str, dict[str, Any]]:
        rows = httpx.get(self.url + "/api/nodes", timeout=10).json()
        return {row["node"]: row for row in rows}

    def session_of(self, node: str, timeout: float = 60.0) -> str:
        """The session `node` announced (its latest: a restarted server starts a new one)."""
        session: str = wait_for(
            f"node {node!r} announced", lambda: self.nodes()[node]["session"], timeout
        )
        return session

    def frames(self, session: str) -> list[dict[str, Any]]:
        """Every recorded frame of `session`, in seq order, decoded."""
        with Session(self.db()) as db:
            return [json.loads(text) for _, text in iter_frames(db, session)]

    def session_row(self, session: str) -> SessionRecord | None:
        with Session(self.db(), expire_on_commit=False) as db:
            return db.get(SessionRecord, session)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self._db is not None:
            self._db.dispose()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_dashboard(
    directory: Path,
    timeout: float = 60.0,
    port: int | None = None,
    node_gone_after_s: float | None = None,
) -> Dashboard:
    """Migrate a fresh SQLite file in `directory` and serve it on `port` (default: a free
    loopback port); `node_gone_after_s`: the dashboard's BATCHSCOPE_NODE_GONE_AFTER_S."""
    directory.mkdir(parents=True, exist_ok=True)
    db_url = f"sqlite:///{directory / 'dash.db'}"
    python = sys.executable
    upgrade = [python, "-m", "app.cli", "db", "upgrade", "--database-url", db_url]
    subprocess.run(upgrade, cwd=ROOT, check=True, capture_output=True, timeout=120)
    port = port or free_port()
    log = directory / "dashboard.log"
    env = dict(os.environ)
    if node_gone_after_s is not None:
        env["BATCHSCOPE_NODE_GONE_AFTER_S"] = str(node_gone_after_s)
    cmd = [python, "-m", "app.cli", "serve", "--no-engine", "--port", str(port)]
    cmd += ["--token", TOKEN, "--database-url", db_url]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_us(),
        )
    dash = Dashboard(f"http://127.0.0.1:{port}", db_url, proc, log)
    try:
        wait_for(
            "dashboard healthy",
            lambda: (
                proc.poll() is None
                and httpx.get(dash.url + "/healthz", timeout=2).status_code == 200
            ),
            timeout,
        )
    except AssertionError:
        dash.stop()
        raise AssertionError(f"dashboard did not start:\n{dash.log_tail()}") from None
    return dash


# ---------------------------------------------------------------- bursts
@dataclass
class Completion:
    """One answered completion: the id vLLM reported, what was asked, what came back."""

    id: str
    body: dict[str, Any]
    result: dict[str, Any]
    latency_s: float

    @property
    def usage(self) -> dict[str, Any]:
        usage: dict[str, Any] = self.result["usage"]
        return usage

    @property
    def choice(self) -> dict[str, Any]:
        choice: dict[str, Any] = self.result["choices"][0]
        return choice


@dataclass
class Burst:
    tag: str
    completions: list[Completion]
    wall_s: float

    @property
    def generated(self) -> int:
        return sum(c.usage["completion_tokens"] for c in self.completions)


def new_tag(prefix: str = "b") -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


async def _complete(
    node: VllmNode, bodies: list[dict[str, Any]], tag: str, concurrency: int | None
) -> tuple[list[Completion], float]:
    limit = asyncio.Semaphore(concurrency or len(bodies) or 1)
    async with httpx.AsyncClient(base_url=node.url, timeout=600) as client:

        async def one(i: int, body: dict[str, Any]) -> Completion:
            async with limit:
                t0 = time.perf_counter()
                response = await client.post(
                    "/v1/completions",
                    json={"model": node.model, "return_token_ids": True, **body},
                    headers={"X-Request-Id": f"{tag}-{i}"},
                )
                latency = time.perf_counter() - t0
            assert response.status_code == 200, response.text
            result: dict[str, Any] = response.json()
            return Completion(str(result["id"]), body, result, latency)

        t0 = time.perf_counter()
        done = await asyncio.gather(*(one(i, b) for i, b in enumerate(bodies)))
        return list(done), time.perf_counter() - t0


def run_burst(
    node: VllmNode,
    bodies: list[dict[str, Any]],
    tag: str | None = None,
    concurrency: int | None = None,
) -> Burst:
    """Send every body at once (or `concurrency` at a time); all must answer 200."""
    tag = tag or new_tag()
    completions, wall = asyncio.run(_complete(node, bodies, tag, concurrency))
    return Burst(tag, completions, wall)


def check_responses(burst: Burst) -> None:
    """Each answer is what was asked for (usage, finish reason, token ids)."""
    for c in burst.completions:
        usage, choice = c.usage, c.choice
        assert c.id.startswith("cmpl-"), c.id
        assert 1 <= usage["completion_tokens"] <= c.body["max_tokens"], c.id
        assert len(choice["token_ids"]) == usage["completion_tokens"], c.id
        assert len(choice["prompt_token_ids"]) == usage["prompt_tokens"], c.id
        if c.body.get("ignore_eos"):
            assert choice["finish_reason"] == "length", c.id
        if choice["finish_reason"] == "length":
            assert usage["completion_tokens"] == c.body["max_tokens"], c.id


# ---------------------------------------------------------------- vLLM's /metrics
def counters(node: VllmNode) -> dict[str, float]:
    text = node.metrics()
    values = {name: parse_metrics(text, name) for name in COUNTERS}
    for reason in REASONS:
        values[reason] = parse_metrics(text, "vllm:request_success_total", finished_reason=reason)
    return values


def metric_deltas(
    node: VllmNode, before: Mapping[str, float], finished: int, timeout: float = 60.0
) -> dict[str, int]:
    """vLLM's counters since `before`, once it has counted `finished` more requests (its
    stats land just after the last response)."""

    def read() -> dict[str, int] | None:
        after = counters(node)
        delta = {k: round(after[k] - before[k]) for k in after}
        return delta if sum(delta[r] for r in REASONS) >= finished else None

    deltas: dict[str, int] = wait_for("vLLM's /metrics counted the burst", read, timeout)
    return deltas


def response_totals(burst: Burst) -> dict[str, int]:
    """The burst's figures as the responses tell, in counters()'s keys."""
    totals = {
        "vllm:prompt_tokens_total": sum(c.usage["prompt_tokens"] for c in burst.completions),
        "vllm:generation_tokens_total": burst.generated,
        **dict.fromkeys(REASONS, 0),
    }
    for c in burst.completions:
        totals[c.choice["finish_reason"]] += 1
    return totals


# ---------------------------------------------------------------- the recording
@dataclass
class Recorded:
    """One request as the dashboard recorded it (its `request` marks and iterations)."""

    req: str
    prompt_tokens: int | None = None
    max_tokens: int | None = None
    arrived_step: int | None = None
    finish_reason: str | None = None
    output_tokens: int | None = None
    output_ids: list[int] = field(default_factory=list)
    finish_step: int | None = None
    preemptions: int = 0
    """Times it appears in an iteration's `preempted` list."""
    preemptions_reported: int | None = None
    """`num_preemptions` of its `finished` mark."""


def owner(req: str, ids: Iterable[str]) -> str | None:
    """The completion id (cmpl-TAG-i) a recorded request id belongs to, if any."""
    for rid in ids:
        if req == rid or req.startswith(rid + "-"):
            return rid
    return None


def recorded_requests(frames: list[dict[str, Any]], tag: str) -> dict[str, Recorded]:
    """The recorded requests of burst `tag` (ids cmpl-TAG-...), by recorded id."""
    prefix = f"cmpl-{tag}-"
    out: dict[str, Recorded] = {}

    def rec(req: str) -> Recorded:
        return out.setdefault(req, Recorded(req))

    for f in frames:
        data = f["data"]
        if f["type"] == "request" and str(data["req"]).startswith(prefix):
            r, detail = rec(data["req"]), data.get("detail") or {}
            if data["kind"] == "arrived":
                r.prompt_tokens, r.max_tokens = detail["num_prompt_tokens"], detail["max_tokens"]
                r.arrived_step = data["step"]
            elif data["kind"] == "finished":
                r.finish_reason, r.output_tokens = detail["reason"], detail["num_output_tokens"]
                r.output_ids = list(detail.get("output_token_ids") or [])
                r.preemptions_reported = detail.get("num_preemptions")
                r.finish_step = data["step"]
        elif f["type"] == "iteration":
            for p in data["preempted"]:
                if str(p["req"]).startswith(prefix):
                    rec(p["req"]).preemptions += 1
    return out


def wait_recorded(
    dash: Dashboard, session: str, tag: str, n: int, timeout: float = 90.0
) -> list[dict[str, Any]]:
    """The session's frames once the `finished` marks of all `n` requests of `tag` landed."""
    box: list[list[dict[str, Any]]] = []

    def done() -> bool:
        frames = dash.frames(session)
        reqs = recorded_requests(frames, tag)
        box[:] = [frames]
        return sum(r.finish_reason is not None for r in reqs.values()) >= n

    wait_for(f"the dashboard recorded burst {tag}", done, timeout, every=0.5)
    return box[0]


def recorded_totals(reqs: Mapping[str, Recorded]) -> dict[str, int]:
    """The burst's figures as the recording tells, in counters()'s keys."""
    totals = {
        "vllm:num_preemptions_total": sum(r.preemptions for r in reqs.values()),
        "vllm:prompt_tokens_total": sum(r.prompt_tokens or 0 for r in reqs.values()),
        "vllm:generation_tokens_total": sum(r.output_tokens or 0 for r in reqs.values()),
        **dict.fromkeys(REASONS, 0),
    }
    for r in reqs.values():
        if r.finish_reason is not None:
            totals[r.finish_reason] = totals.get(r.finish_reason, 0) + 1
    return totals


def check_recording(
    dash: Dashboard, session: str, burst: Burst, deltas: Mapping[str, int]
) -> tuple[list[dict[str, Any]], dict[str, Recorded]]:
    """The recording of `burst` equals vLLM's /metrics deltas and each response. Returns
    (the session's frames, the burst's recorded requests)."""
    frames = wait_recorded(dash, session, burst.tag, len(burst.completions))
    # Numbered without holes: nothing dropped on the way or refused by the recorder.
    assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
    gaps = [f for f in frames if f["type"] == "session" and f["data"].get("event") == "gap"]
    assert not gaps, gaps
    reqs = recorded_requests(frames, burst.tag)
    ids = [c.id for c in burst.completions]
    by_owner: dict[str, list[Recorded]] = {}
    for r in reqs.values():
        rid = owner(r.req, ids)
        assert rid is not None, f"recorded {r.req} is none of the burst's completions"
        by_owner.setdefault(rid, []).append(r)
    assert sorted(by_owner) == sorted(ids), "each completion is one recorded request"
    for c in burst.completions:
        (r,) = by_owner[c.id]
        at = f"{c.id} (recorded as {r.req})"
        assert r.prompt_tokens == c.usage["prompt_tokens"], at
        assert r.max_tokens == c.body["max_tokens"], at
        assert r.output_tokens == c.usage["completion_tokens"], at
        assert r.output_ids == c.choice["token_ids"], at
        assert r.finish_reason == c.choice["finish_reason"], at
        assert r.preemptions_reported == r.preemptions, at
    recorded = recorded_totals(reqs)
    # The whole node's counters moved by this burst only (tests run one at a time).
    assert recorded == {k: deltas[k] for k in recorded}, (recorded, deltas)
    assert response_totals(burst) == {k: deltas[k] for k in response_totals(burst)}
    return frames, reqs


def announce(frames: list[dict[str, Any]]) -> dict[str, Any]:
    """The session's `opened` mark: the node's announce as the dashboard recorded it."""
    first = frames[0]
    assert (first["type"], first["data"]["event"]) == ("session", "opened"), first
    data: dict[str, Any] = first["data"]
    return data


def iterations(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f["data"] for f in frames if f["type"] == "iteration"]
