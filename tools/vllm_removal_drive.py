"""Take away, one at a time, each vLLM attribute the adapter reads: vLLM must serve the same.

Runs in a vLLM venv with the repository on PYTHONPATH (tests/vllm/test_observer_removals.py):

    BATCHSCOPE_URL=ws://127.0.0.1:8000/ws/ingest BATCHSCOPE_TOKEN=T \\
        .venv-vllm/bin/python tools/vllm_removal_drive.py SCENARIO.json --out-dir DIR \\
        --remove Request.prompt_token_ids ModelRunnerOutput.sampled_token_ids

`--remove CLASS.ATTR` stands for a vLLM release without that attribute, as the adapter sees
it: vLLM's class is monkeypatched in this process so that a read from batchscope_vllm's code
(hooks and sender thread) raises AttributeError, as a missing attribute does, while vLLM's
own code reads it as before (a dataclass field also leaves the class's fields). For each
removal the scenario runs twice, built and driven like tools/vllm_reference.py: unobserved
(the reference) and observed with the attribute taken away. DIR/<stem>.<CLASS.ATTR>.json
holds both runs' decisions compared (`identical`), the observer's errors and degraded
observations, and the session it streamed, for the test to read the recording.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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

CLASSES = {
    "Request": "vllm.v1.request",
    "SchedulerOutput": "vllm.v1.core.sched.output",
    "CachedRequestData": "vllm.v1.core.sched.output",
    "ModelRunnerOutput": "vllm.v1.outputs",
    "BlockPool": "vllm.v1.core.block_pool",
}
"""The vLLM classes whose attributes can be taken away (CLASS.ATTR), and their modules."""
OBSERVER_PACKAGE = "batchscope_vllm"


def _hidden_from_observer(cls: type, name: str) -> Callable[[Any, str], Any]:
    original: Any = cls.__getattribute__

    def __getattribute__(self: Any, attr: str) -> Any:
        if attr == name:
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller == OBSERVER_PACKAGE or caller.startswith(OBSERVER_PACKAGE + "."):
                raise AttributeError(f"{cls.__name__!r} object has no attribute {attr!r}")
        return original(self, attr)

    return __getattribute__


@contextmanager
def removed(spec: str) -> Iterator[None]:
    """vLLM's CLASS without ATTR, as batchscope_vllm reads it (vLLM's reads unchanged)."""
    cls_name, _, attr = spec.partition(".")
    if cls_name not in CLASSES or not attr:
        raise SystemExit(f"--remove {spec!r}: CLASS.ATTR with CLASS one of {sorted(CLASSES)}")
    cls = getattr(importlib.import_module(CLASSES[cls_name]), cls_name)
    had = "__getattribute__" in cls.__dict__
    saved = cls.__dict__.get("__getattribute__")
    cls.__getattribute__ = _hidden_from_observer(cls, attr)  # type: ignore[method-assign]
    # A dataclass's field goes from its fields too (what the adapter probes at start;
    # vLLM's generated __init__ and the scheduler do not read them).
    fields: dict[str, Any] = getattr(cls, "__dataclass_fields__", {})
    field = fields.pop(attr, None)
    try:
        yield
    finally:
        if field is not None:
            fields[attr] = field
        if had:
            cls.__getattribute__ = saved  # type: ignore[method-assign]
        else:
            del cls.__getattribute__


def _decisions(result: dict[str, Any]) -> dict[str, Any]:
    return {k: result[k] for k in ("steps", "requests", "num_steps", "total_preemptions")}


def run_case(scenario: Scenario, spec: str, use_async: bool) -> dict[str, Any]:
    num_spec = int(scenario.config.scheduler.num_speculative_tokens)
    plain_cls = RecordingAsyncScheduler if use_async else RecordingScheduler
    reference = drive(build_scheduler(scenario, plain_cls), scenario)
    base = DriveAsyncScheduler if use_async else DriveScheduler
    cls = type(base.__name__, (base,), {"num_spec_at_init": num_spec})
    with removed(spec):
        sched: Any = build_scheduler(scenario, cls)
        sender = sched.batchscope
        observed = drive(sched, scenario)
        delivered = sched.close(20.0)
    return {
        "removed": spec,
        "async": use_async,
        "identical": _decisions(observed) == _decisions(reference),
        "num_steps": observed["num_steps"],
        "num_requests": len(observed["requests"]),
        "total_preemptions": observed["total_preemptions"],
        "observer_errors": sched.observer_errors,
        "failed_in": sender.failed,
        "degraded": dict(sender.degraded),
        "delivered": delivered,
        "session": sender.session,
        "last_seq": sender.seq,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", type=Path)
    parser.add_argument("--async", dest="use_async", action="store_true")
    parser.add_argument("--remove", nargs="+", required=True, metavar="CLASS.ATTR")
    parser.add_argument("--out-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    if not os.environ.get("BATCHSCOPE_URL"):
        raise SystemExit("set BATCHSCOPE_URL (and BATCHSCOPE_TOKEN)")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    scenario = load_scenario(args.scenario)
    tag = ".async" if args.use_async else ""
    for spec in args.remove:
        os.environ["BATCHSCOPE_NAME"] = f"without {spec}{tag}"
        result = run_case(scenario, spec, args.use_async)
        (args.out_dir / f"{args.scenario.stem}{tag}.{spec}.json").write_text(json.dumps(result))
        print(f"{spec}{tag}: identical={result['identical']} degraded={result['degraded']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
