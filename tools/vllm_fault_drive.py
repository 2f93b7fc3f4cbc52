"""Make each observer hook fail under vLLM's real scheduler: vLLM must decide the same.

Runs in a vLLM venv with the repository on PYTHONPATH (tests/vllm/test_observer_faults.py):

    BATCHSCOPE_URL=ws://127.0.0.1:8000/ws/ingest BATCHSCOPE_TOKEN=T \\
        .venv-vllm/bin/python tools/vllm_fault_drive.py SCENARIO.json --out-dir DIR

For every hook (each `_bs_*` observation of batchscope_vllm's scheduler, and the sender
thread's frame building) the scenario runs twice, built and driven like
tools/vllm_reference.py: through vLLM's scheduler unobserved (the reference), and through
the observed scheduler whose observation in that hook raises at its FAIL_AT-th call. It
writes DIR/<stem>.<hook>.json: both runs' per-step decisions compared (`identical`), what
the observer did (errors counted, logged records, its sender stopped, the session it
closed) and the session id, for the test to read the recording. `vllm_error` checks the
other way round: an exception of vLLM's own passes through the observer unchanged.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from engine.scenario import Scenario, load_scenario  # noqa: E402
from tools.vllm_adapter_drive import DriveAsyncScheduler, DriveScheduler  # noqa: E402
from tools.vllm_reference import (  # noqa: E402
    RecordingAsyncScheduler,
    RecordingScheduler,
    build_scheduler,
    drive,
)

HOOKS = {
    "add_request": "_bs_on_add",
    "preempt": "_bs_on_preempt",
    "schedule_before": "_bs_before_schedule",
    "schedule_after": "_bs_on_schedule",
    "update_before": "_bs_before_update",
    "update_after": "_bs_on_update",
    "frames": None,  # the sender thread's FrameBuilder.build
}
FAIL_AT = 3
"""The call that fails (1-based): observing has started and goes on after it."""


class InjectedFailure(RuntimeError):
    pass


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _failing(cls: type, method: str) -> type:
    """`cls` whose `method` raises at its FAIL_AT-th call (and works before and after)."""
    calls = [0]
    original = getattr(cls, method)

    def hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == FAIL_AT:
            raise InjectedFailure(f"injected into {method}")
        return original(self, *args, **kwargs)

    return type(f"Failing{cls.__name__}", (cls,), {method: hook})


def _fail_frames(sched: Any) -> None:
    builder = sched.batchscope.builder
    build, calls = builder.build, [0]

    def failing(item: Any) -> Any:
        calls[0] += 1
        if calls[0] == FAIL_AT:
            raise InjectedFailure("injected into FrameBuilder.build")
        return build(item)

    builder.build = failing


def _decisions(result: dict[str, Any]) -> dict[str, Any]:
    return {k: result[k] for k in ("steps", "requests", "num_steps", "total_preemptions")}


def run_case(scenario: Scenario, hook: str, use_async: bool) -> dict[str, Any]:
    plain_cls = RecordingAsyncScheduler if use_async else RecordingScheduler
    reference = drive(build_scheduler(scenario, plain_cls), scenario)
    base = DriveAsyncScheduler if use_async else DriveScheduler
    method = HOOKS[hook]
    cls = _failing(base, method) if method else base
    log = logging.getLogger("batchscope_vllm")
    records = _Records()
    log.addHandler(records)
    try:
        sched: Any = build_scheduler(scenario, cls)
        sender = sched.batchscope
        if method is None:
            _fail_frames(sched)
        observed = drive(sched, scenario)
        # The sender thread reaches the failing item in its own time, and detaches the
        # hooks just after it says so: wait for both (a loaded machine delays either).
        deadline = time.monotonic() + 60.0
        while (sender.failed is None or sched._bs_put is not None) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.01)
        detached = sched._bs_put is None
        delivered = sched.close(20.0)
    finally:
        log.removeHandler(records)
    last = json.loads(sender.frames.history[-1][1]) if sender.frames.history else {}
    return {
        "hook": hook,
        "async": use_async,
        "identical": _decisions(observed) == _decisions(reference),
        "num_steps": observed["num_steps"],
        "total_preemptions": observed["total_preemptions"],
        "observer_errors": sched.observer_errors,
        "failed_in": sender.failed,
        "detached": detached,
        "sender_stopped": not sender._thread.is_alive(),
        "delivered": delivered,
        "logged": [r.getMessage() for r in records.records],
        "tracebacks": sum(1 for r in records.records if r.exc_info),
        "session": sender.session,
        "last_seq": sender.seq,
        "last_frame": {"type": last.get("type"), **(last.get("data") or {})},
    }


def vllm_error(scenario: Scenario) -> dict[str, Any]:
    """An exception raised by vLLM itself (update_from_output without a runner output)
    reaches the caller as vLLM raised it; the observer counts nothing."""
    raised: dict[str, str] = {}
    for name, cls in (("plain", RecordingScheduler), ("observed", DriveScheduler)):
        sched: Any = build_scheduler(scenario, cls)
        driver_result = drive(sched, scenario)  # a run, then one bogus call
        assert driver_result["num_steps"] > 0
        out = sched.schedule()
        try:
            sched.update_from_output(out, None)
            raised[name] = "nothing"
        except Exception as exc:  # what vLLM raises, as it raised it
            raised[name] = type(exc).__name__
        if name == "observed":
            raised["observer_errors"] = str(sched.observer_errors)
            sched.close(5.0)
    return raised


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", type=Path)
    parser.add_argument("--async", dest="use_async", action="store_true")
    parser.add_argument("--hooks", nargs="*", default=list(HOOKS))
    parser.add_argument("--out-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    if not os.environ.get("BATCHSCOPE_URL"):
        raise SystemExit("set BATCHSCOPE_URL (and BATCHSCOPE_TOKEN)")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    scenario = load_scenario(args.scenario)
    tag = ".async" if args.use_async else ""
    for hook in args.hooks:
        os.environ["BATCHSCOPE_NAME"] = f"fault {hook}{tag}"
        result = run_case(scenario, hook, args.use_async)
        (args.out_dir / f"{args.scenario.stem}{tag}.{hook}.json").write_text(json.dumps(result))
        print(f"{hook}{tag}: identical={result['identical']}", flush=True)
    if not args.use_async:
        (args.out_dir / "vllm_error.json").write_text(json.dumps(vllm_error(scenario)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
