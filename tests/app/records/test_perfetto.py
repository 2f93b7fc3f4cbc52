"""The Perfetto (Chrome JSON) trace has the tracks docs/export.md documents, and they say
what the frames say."""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.db import queries
from app.records.export import perfetto_trace
from tests.conftest import ROOT

Recorded = tuple[sessionmaker[Session], str]
SLICES = {"queued", "prefill", "decode", "preempted"}
COUNTERS = {
    "KV blocks": {"used", "cached"},
    "queue depth": {"running", "waiting"},
    "tokens per step": {"prefill", "decode"},
}


@pytest.fixture(scope="module")
def traced(recorded: Recorded) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    sessions, sid = recorded
    with sessions() as db:
        trace = perfetto_trace(db, sid)
        frames = [json.loads(text) for _, text in queries.iter_frames(db, sid)]
        rows = queries.request_rows(db, sid)
    return json.loads(json.dumps(trace)), frames, rows


def test_one_named_track_per_request_and_the_session_process(traced: Any) -> None:
    trace, _frames, rows = traced
    events = trace["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    assert [e["args"]["name"] for e in meta if e["name"] == "process_name"] == ["records test"]
    names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert sorted(names.values()) == sorted(r["req_id"] for r in rows)
    assert len(set(names)) == len(names)
    assert {e["name"] for e in events if e["ph"] == "X"} == SLICES
    assert trace["displayTimeUnit"] == "ms"


def test_slices_follow_the_frames(traced: Any) -> None:
    trace, frames, _rows = traced
    by_tid: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            by_tid[e["tid"]].append(e)
    names = {
        e["tid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    tokens: Counter[str] = Counter()
    for tid, slices in by_tid.items():
        slices.sort(key=lambda e: e["ts"])
        for a, b in itertools.pairwise(slices):
            assert b["ts"] >= a["ts"] + a["dur"] - 1e-6, (a, b)  # no overlap on a track
            if a["name"] == b["name"] == "decode":  # consecutive decode steps are merged
                assert b["args"]["first_step"] > a["args"]["last_step"] + 1
        tokens[names[tid]] = sum(
            s["args"]["tokens"] for s in slices if s["name"] in ("prefill", "decode")
        )
    iterations = [f["data"] for f in frames if f["type"] == "iteration"]
    scheduled: Counter[str] = Counter()
    for it in iterations:
        for item in it["scheduled"]:
            scheduled[item["req"]] += item["n"]
    assert tokens == scheduled
    preemptions = sum(len(it["preempted"]) for it in iterations)
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert preemptions > 0
    assert sum(e["name"] == "preempted" for e in slices) == preemptions
    arrivals = {
        f["data"]["req"]: f["data"]["t"]
        for f in frames
        if f["type"] == "request" and f["data"]["kind"] == "arrived"
    }
    queued = {names[e["tid"]]: e["ts"] for e in slices if e["name"] == "queued"}
    assert queued == pytest.approx({r: t * 1e6 for r, t in arrivals.items()}, abs=1)


def test_counter_tracks_carry_every_step(traced: Any) -> None:
    trace, frames, _rows = traced
    iterations = [f["data"] for f in frames if f["type"] == "iteration"]
    counters: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "C":
            counters[e["name"]].append(e)
    assert {name: set(events[0]["args"]) for name, events in counters.items()} == COUNTERS
    assert all(len(events) == len(iterations) for events in counters.values())
    assert [e["args"]["used"] for e in counters["KV blocks"]] == [
        it["kv"]["used"] for it in iterations
    ]
    assert [e["args"]["waiting"] for e in counters["queue depth"]] == [
        it["queues"]["waiting"] for it in iterations
    ]
    assert [e["args"]["decode"] for e in counters["tokens per step"]] == [
        it["budget"]["decode"] for it in iterations
    ]
    assert [e["ts"] for e in counters["KV blocks"]] == pytest.approx(
        [it["t_start"] * 1e6 for it in iterations], abs=1e-3
    )


def test_docs_name_every_track(traced: Any) -> None:
    trace, _frames, _rows = traced
    doc = (ROOT / "docs" / "export.md").read_text(encoding="utf-8")
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] in ("X", "C", "i")}
    names = {n for n in names if not n.startswith("config v")} | {"config v"}
    for name in names | set(COUNTERS) | {"thread_name", "process_name"}:
        assert f"`{name}" in doc, name


def test_drafts_get_their_own_slices_and_counters() -> None:
    """A speculative-decoding run: each draft-verifying step is a slice with the drafts
    and how many held, and the counter sums what the frames say."""
    from app.frames.convert import event_to_frame
    from app.records.trace import TraceBuilder
    from tests.engine.helpers import scenario_events

    builder = TraceBuilder("spec")
    frames = [event_to_frame(ev) for ev in scenario_events(ROOT / "scenarios" / "spec_decode.json")]
    for kind, data in frames:
        builder.add(kind, data)
    trace = json.loads(json.dumps(builder.finish()))
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X" and "drafts" in e["name"]]
    its = [d for kind, d in frames if kind == "iteration"]
    want = [(i["req"], i["spec"]) for d in its for i in d["scheduled"] if i.get("spec")]
    assert len(slices) == len(want) > 0
    assert sum(e["args"]["accepted"] for e in slices) == sum(
        sum(d.get("accepted", {}).values()) for d in its
    )
    counter = [e for e in trace["traceEvents"] if e["name"] == "speculative decoding"]
    assert sum(e["args"]["drafts"] for e in counter) == sum(n for _, n in want)
