"""A re-run in an engine process of its own (`batchscope engine --rerun`): the dashboard
writes the job (knobs, runner, arrivals) to its stdin as one JSON line; it writes the new
session's frames to stdout, one encoded envelope per line, which go to the recorder's
writer in bounded batches as they come. The web process never runs the engine nor holds
the whole run; a re-run that fails says why (its last stderr lines) and records nothing
half-way as if complete (its session is not marked closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from typing import IO, Any

from app.db.queries import SessionRow
from app.db.writer_process import TextFrame
from app.frames.convert import event_to_frame
from app.records.recorder import Recorder
from app.records.rerun import Arrival, KnobChange, rerun_events
from engine.config import EngineConfig
from engine.events import Event
from engine.request import SamplingParams
from engine.runner.cost_model import describe_cost_model
from engine.runner.recorded_timeline import RecordedTimeline
from protocol.codes import FrameType, SessionEvent
from protocol.envelope import encode, split_frame
from protocol.producer import ProducerCore
from protocol.session import new_session_id, session_meta
from protocol.wire import KnobValue, SessionMeta

BATCH_FRAMES = 2000
LINE_LIMIT = 64 << 20


class RerunFailed(RuntimeError):
    """The re-run's engine process failed (its last stderr lines say why)."""


# ------------------------------------------------------------ the engine process
class _LineSink:
    """EventSink: every frame one encoded envelope line on `out`, numbered and enveloped by
    the producer core (the pipe is reliable: nothing is held once written)."""

    def __init__(self, session: str, out: IO[str]) -> None:
        self.core = ProducerCore(session, node="rerun", keep_sent=False)
        self.out = out

    def add(self, frame_type: str, data: Mapping[str, Any]) -> None:
        seq, text = self.core.add(frame_type, encode(data))
        self.out.write(text + "\n")
        self.core.mark_sent(seq)

    def emit(self, event: Event) -> None:
        frame_type, data = event_to_frame(event)
        self.add(frame_type, data)


def run_job(inp: IO[str], out: IO[str]) -> None:
    """The engine process's side: one job from `inp`, its frames to `out`."""
    job = json.loads(inp.readline())
    config = EngineConfig().with_updates(**job["config"])
    arrivals = [
        Arrival(t, req_id, prompt, SamplingParams(**params), priority)
        for t, req_id, prompt, params, priority in job["arrivals"]
    ]
    knobs = [KnobChange(t, step, changes) for t, step, changes in job.get("knobs", [])]
    timeline = RecordedTimeline.from_wire(job["timeline"]) if job.get("timeline") else None
    sink = _LineSink(job["session"], out)
    sink.add(FrameType.SESSION, {"event": SessionEvent.OPENED, **job["meta"]})
    rerun_events(
        config,
        arrivals,
        job["runner"],
        sink,
        knobs=knobs,
        timeline=timeline,
        cost_model=job.get("cost_model"),
    )
    sink.add(FrameType.SESSION, {"event": SessionEvent.CLOSED})
    out.flush()


# --------------------------------------------------------------- the dashboard
def _job(
    session: str,
    meta: SessionMeta,
    config: EngineConfig,
    runner: str,
    arrivals: list[Arrival],
    knobs: Sequence[KnobChange],
    timeline: RecordedTimeline | None,
    cost_model: str | None = None,
) -> bytes:
    wire = [
        [
            a.t,
            a.req_id,
            a.prompt_token_ids,
            {
                "max_tokens": a.params.max_tokens,
                "temperature": a.params.temperature,
                "top_p": a.params.top_p,
                "seed": a.params.seed,
            },
            a.priority,
        ]
        for a in arrivals
    ]
    job = {
        "session": session,
        "meta": meta,
        "config": config.as_dict(),
        "runner": runner,
        "arrivals": wire,
        "knobs": [[k.t, k.step, k.changes] for k in knobs],
        "timeline": timeline.as_wire() if timeline is not None else None,
        "cost_model": cost_model,
    }
    return (encode(job) + "\n").encode()


CLOCKS = {
    "recorded": "the recording's own step times while the plan matches it, then a cost "
    "model fitted on its steps",
    "sim": "the SimRunner's cost model",
    "torch": "wall clock: the model really runs, so step times (and what arrives when) "
    "differ from the recording's",
}


def rerun_meta(
    source: SessionRow,
    config: EngineConfig,
    changes: Mapping[str, KnobValue],
    runner_kind: str,
    label: str,
    not_modelled: Sequence[str] = (),
    cost_model: str | None = None,
) -> SessionMeta:
    """The re-run's metadata: what it inherits from `source` (model, device, the runner
    it follows), what it changed (`changes`), and the clock its steps ran on (runner sim
    with `cost_model`: that preset, its label and source)."""
    recorded = runner_kind == "recorded"
    clock = CLOCKS.get(runner_kind, runner_kind)
    extra: dict[str, str] = {}
    if cost_model:
        info = describe_cost_model(cost_model)
        clock = f"{clock}: {info['label']}"
        extra = {
            "cost_model": cost_model,
            "cost_model_label": info["label"],
            "cost_model_source": info["source"],
        }
    return session_meta(
        label,
        "rerun",
        runner=runner_kind,
        simulated=runner_kind != "torch",
        model=source["model"] if recorded else "",
        device=source["device"] if recorded else "",
        config=config.as_dict(),
        rerun_of=source["id"],
        rerun_changes=dict(changes),
        source_runner=source["runner"],
        clock=clock,
        not_modelled=list(not_modelled),
        **extra,
    )


async def rerun_session(
    recorder: Recorder,
    source: SessionRow,
    arrivals: list[Arrival],
    config: EngineConfig,
    changes: Mapping[str, KnobValue],
    runner_kind: str,
    name: str = "",
    knob_changes: Sequence[KnobChange] = (),
    timeline: RecordedTimeline | None = None,
    not_modelled: Sequence[str] = (),
    cost_model: str | None = None,
) -> tuple[str, str, int]:
    """Re-run `source`'s arrivals under `config` in an engine process and record the
    result as a new, closed session (source `rerun`). `knob_changes`: the recorded ones
    it replays (rerun.replayed_knob_changes); `timeline`: the recording's, which runner
    `recorded` follows; `not_modelled`: a node's knobs dropped (app.records.node_rerun);
    `cost_model`: runner sim's preset. Returns (id, name, steps)."""
    new_id = new_session_id()
    knobs = ", ".join(f"{k}={v}" for k, v in changes.items()) or "same knobs"
    label = name or f"rerun of {source['name'] or source['id']}: {knobs}"
    meta = rerun_meta(source, config, changes, runner_kind, label, not_modelled, cost_model)
    job = _job(
        new_id, meta, config, runner_kind, arrivals, knob_changes, timeline, cost_model
    )  # (fails here)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "app.cli",
        "engine",
        "--rerun",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=LINE_LIMIT,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    errors: deque[str] = deque(maxlen=20)

    async def feed() -> None:
        assert proc.stdin is not None
        with contextlib.suppress(ConnectionError):
            proc.stdin.write(job)
            await proc.stdin.drain()
            proc.stdin.close()

    async def read_errors() -> None:
        assert proc.stderr is not None
        while line := await proc.stderr.readline():
            errors.append(line.decode(errors="replace").rstrip())

    side = [asyncio.create_task(feed()), asyncio.create_task(read_errors())]
    steps = 0
    batch: list[TextFrame] = []
    try:
        while line := await proc.stdout.readline():
            text = line.decode().rstrip("\n")
            frame = split_frame(text)
            if frame is None:
                raise RerunFailed(f"the re-run's engine wrote an unreadable line: {text[:80]}")
            steps += frame.type == FrameType.ITERATION
            batch.append(TextFrame(new_id, frame.type, frame.seq, text))
            if len(batch) >= BATCH_FRAMES:
                await recorder.write_now(batch)
                batch = []
        code = await proc.wait()
        await asyncio.gather(*side, return_exceptions=True)
        if code != 0:
            last = "; ".join(list(errors)[-3:]) or f"exit code {code}"
            raise RerunFailed(f"the re-run's engine process failed: {last}")
        if batch:
            await recorder.write_now(batch)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        for task in side:
            task.cancel()
    return new_id, label, steps
