"""The adapter in a vLLM release's own engine loop: `EngineCore.step` (sync, with
`post_step` handing the drafter's proposals to the scheduler) and
`EngineCore.step_with_batch_queue` (async scheduling, a batch queue of 2), with and
without speculative decoding, the scheduler built from the class name the way
`--scheduler-cls batchscope_vllm.ObservedScheduler` names it. Runs in the release's
python with the repository on PYTHONPATH (tools/vllm_release_check.py).

What is vLLM's and what stands in:
- vLLM's: the scheduler (vLLM's Scheduler / AsyncScheduler under the adapter), the
  class resolved from its qualified name by vLLM's own resolver, and the loop code,
  `EngineCore.step`, `step_with_batch_queue`, `post_step`, `add_request`, called on an
  EngineCore instance.
- standing in: the model. `StandInExecutor` answers EngineCore's calls
  (`execute_model`, `sample_tokens`, `take_draft_token_ids`) with vLLM's own
  ModelRunnerOutput / DraftTokenIds objects: the scenario token rule on the runner's
  own view of each request (the tokens it has sampled, batches in flight included), the
  n-gram drafter and verifier of docs/scenarios.md (in async scheduling the runner
  proposes the drafts itself, in place of the scheduler's -1 placeholders, as vLLM's
  worker does).
- not run: `EngineCore.__init__`. It profiles a real model (executor start, KV-cache
  sizing by memory, compile/warm-up), which a CPU box with vLLM's CUDA wheel cannot do.
  The instance is made with `EngineCore.__new__` and given what the loop methods read:
  the scheduler, the executor, the batch queue (`max_concurrent_batches` 2 under async
  scheduling), the flags `__init__` derives from the config (`use_spec_decode`,
  `check_for_draft_tokens`, `async_scheduling`, `is_pooling_model`, ...) and the aborts
  queue, each as that release's `__init__` sets it. An attribute a future release's loop
  reads that is not set here fails the check by name (`AttributeError`), never silently.

The truth the adapter's frames are checked against is vLLM's, read by the stand-in
executor from the objects the loop hands it: each SchedulerOutput (the plan, its
preemptions) with the scheduler's request counts at that moment, and each step's
EngineCoreOutputs (the finished requests).
"""

from __future__ import annotations

import json
import os
import queue
import sys
from collections import defaultdict, deque
from concurrent.futures import Future
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.v1.engine.core import EngineCore  # noqa: E402
from vllm.v1.outputs import DraftTokenIds  # noqa: E402
from vllm.v1.request import Request  # noqa: E402

from engine.runner.sim import sim_drafts, sim_token, verify_drafts  # noqa: E402
from engine.scenario import Scenario  # noqa: E402
from tools.vllm_drive import runner_output  # noqa: E402
from tools.vllm_reference import _rejection_reason, build_scheduler  # noqa: E402

SCHEDULER_CLS = "batchscope_vllm.ObservedScheduler"
"""What an operator passes as `--scheduler-cls`."""


def resolve_scheduler_cls(qualname: str) -> type:
    """The class, by vLLM's own resolver (where this release keeps it)."""
    try:
        from vllm.utils.import_utils import resolve_obj_by_qualname
    except ImportError:
        from vllm.utils import resolve_obj_by_qualname  # type: ignore[no-redef,attr-defined]
    cls: type = resolve_obj_by_qualname(qualname)
    return cls


class _Device(Future[Any]):
    """A batch on the device: never done when the loop looks (`done()`), its output there
    when the loop waits for it (`result()`), as a device that is slower than the loop."""

    def __init__(self, value: Any) -> None:
        super().__init__()
        self._value = value

    def result(self, timeout: float | None = None) -> Any:
        if not super().done():
            self.set_result(self._value)
        return super().result(timeout)


class StandInExecutor:
    """The model behind EngineCore's loop (no GPU): answers execute_model /
    sample_tokens with vLLM's ModelRunnerOutput and take_draft_token_ids with its
    DraftTokenIds, and records vLLM's decisions as the loop hands them over."""

    def __init__(self, sched: Any, num_spec: int, async_loop: bool) -> None:
        self.sched = sched
        self.num_spec = num_spec
        self.max_concurrent_batches = 2 if async_loop else 1
        self.view: dict[str, list[int]] = {}
        """The runner's tokens per request (what it has sampled, batches in flight too)."""
        self.last_sampled: list[str] = []
        self.last_output: Any = None
        self.plans: list[dict[str, Any]] = []
        """vLLM's decision at each schedule() the loop ran, in order."""

    # -------------------------------------------------- what EngineCore calls
    def execute_model(self, scheduler_output: Any, non_block: bool = False) -> Any:
        self.last_output = self._run(scheduler_output)
        return _Device(self.last_output) if non_block else self.last_output

    def sample_tokens(self, grammar_output: Any = None, non_block: bool = False) -> Any:  # noqa: ARG002 (vLLM's signature)
        return _Device(self.last_output) if non_block else self.last_output

    def take_draft_token_ids(self) -> DraftTokenIds | None:
        if not self.num_spec or not self.last_sampled:
            return None
        ids = [rid for rid in self.last_sampled if rid in self.sched.requests]
        drafts = [sim_drafts(self.view[rid], k, self.num_spec) for k, rid in enumerate(ids)]
        return DraftTokenIds(ids, drafts)

    def register_failure_callback(self, callback: Any) -> None:
        pass

    def shutdown(self) -> None:
        pass

    # -------------------------------------------------- the stand-in model
    def _fresh(self, out: Any) -> set[str]:
        """Requests the runner (re)starts from the scheduler's tokens: new ones and, by
        whichever way the release lists them, resumed ones."""
        fresh = {d.req_id for d in out.scheduled_new_reqs}
        cached = out.scheduled_cached_reqs
        resumed = getattr(cached, "resumed_req_ids", None)
        if resumed is not None:
            fresh |= set(resumed)
        flags = getattr(cached, "resumed_from_preemption", None)
        if flags:
            fresh |= {rid for rid, flag in zip(cached.req_ids, flags, strict=False) if flag}
        return fresh

    def _run(self, out: Any) -> Any:
        sched = self.sched
        running, waiting = sched.get_request_counts()
        self.plans.append(
            {
                "scheduled": dict(out.num_scheduled_tokens),
                "preempted": sorted(out.preempted_req_ids or ()),
                "num_running": running,
                "num_waiting": waiting,
            }
        )
        for rid in self._fresh(out):
            self.view[rid] = list(sched.requests[rid].all_token_ids)
        req_ids = list(out.num_scheduled_tokens)
        sampled: list[list[int]] = []
        drafting = 0
        for rid in req_ids:
            request = sched.requests[rid]
            if request.is_prefill_chunk:
                sampled.append([])
                continue
            view = self.view[rid]
            drafts = list(out.scheduled_spec_decode_tokens.get(rid) or ())
            if drafts and all(t == -1 for t in drafts):
                # async scheduling: -1 placeholders; the worker drafts (here: the runner)
                drafts = sim_drafts(view, drafting, len(drafts))[: len(drafts)]
                drafting += 1
            tokens = verify_drafts(view[-1], len(view), drafts) if drafts else None
            tokens = tokens or [sim_token(view[-1], len(view))]
            view.extend(tokens)
            sampled.append(tokens)
        self.last_sampled = [rid for rid, t in zip(req_ids, sampled, strict=True) if t]
        return runner_output(req_ids, sampled)


def make_core(sched: Any, executor: StandInExecutor, async_loop: bool, num_spec: int) -> Any:
    """An EngineCore whose loop methods run as vLLM wrote them (see the module doc)."""
    core: Any = EngineCore.__new__(EngineCore)
    config = sched.vllm_config
    core.vllm_config = config
    core.log_stats = True
    core._weight_version = "default"
    core.model_executor = executor
    core.scheduler = sched
    core.structured_output_manager = sched.structured_output_manager
    core.batch_queue_size = executor.max_concurrent_batches
    core.batch_queue = deque(maxlen=2) if async_loop else None
    ec = getattr(config, "ec_transfer_config", None)
    core.is_ec_consumer = ec is None or bool(ec.is_ec_consumer)  # (0.20 .. 0.2x's name)
    core.is_mm_encoder_only = False
    core.is_pooling_model = config.model_config.runner_type == "pooling"
    core.use_spec_decode = bool(num_spec)
    core.check_for_draft_tokens = bool(num_spec)
    core.async_scheduling = async_loop
    core.aborts_queue = queue.Queue()
    core.step_fn = core.step_with_batch_queue if async_loop else core.step
    core._idle_state_callbacks = []
    core.mm_receiver_cache = None
    return core


def build(scenario: Scenario, async_loop: bool, cls: type | None = None) -> Any:
    """The scheduler of class `cls` (default: resolved from SCHEDULER_CLS), built on the
    scenario's knobs with vLLM's async scheduling and speculative decoding as asked."""
    num_spec = int(scenario.config.scheduler.num_speculative_tokens)
    cls = cls or resolve_scheduler_cls(SCHEDULER_CLS)
    return build_scheduler(scenario, cls, async_scheduling=async_loop, num_spec=num_spec)


def run(scenario: Scenario, async_loop: bool, sched: Any) -> dict[str, Any]:
    """The scenario through `sched` in the release's own loop: vLLM's decisions per step
    (as the loop handed them over), and each step's finished requests."""
    num_spec = int(scenario.config.scheduler.num_speculative_tokens)
    executor = StandInExecutor(sched, num_spec, async_loop)
    core = make_core(sched, executor, async_loop, num_spec)
    cc = scenario.config.cache
    hasher = None
    if cc.enable_prefix_caching:
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher

        hasher = get_request_block_hasher(cc.block_size, sha256)
    arrivals: dict[int, list[Any]] = defaultdict(list)
    for r in scenario.requests:
        arrivals[r.arrival_step].append(r)
    last_arrival = max(arrivals, default=-1)
    steps: list[dict[str, Any]] = []
    num_added = 0
    for turn in range(scenario.max_steps):
        for r in arrivals.get(turn, []):
            if _rejection_reason(scenario, len(r.prompt_token_ids), r.sampling_params.max_tokens):
                continue
            core.add_request(
                Request(
                    request_id=r.id,
                    prompt_token_ids=list(r.prompt_token_ids),
                    sampling_params=SamplingParams(
                        max_tokens=r.sampling_params.max_tokens, ignore_eos=True, temperature=0.0
                    ),
                    pooling_params=None,
                    arrival_time=float(num_added),
                    priority=r.priority,
                    block_hasher=hasher,
                )
            )
            num_added += 1
        busy = sched.has_requests() or bool(core.batch_queue)
        if not busy:
            if turn >= last_arrival:
                break
            continue  # vLLM's busy loop waits for input: no step
        planned = len(executor.plans)
        outputs, executed = core.step_fn()
        if not async_loop and hasattr(core, "post_step"):
            core.post_step(executed)
        finished = sorted(
            o.request_id
            for eco in (outputs or {}).values()
            for o in eco.outputs
            if o.finish_reason is not None
        )
        plan = executor.plans[planned] if len(executor.plans) > planned else None
        updated = outputs is not None
        if (plan is None or not plan["scheduled"]) and not updated:
            continue  # an idle turn: no frame
        steps.append({"plan": plan, "finished": finished})
    return {"steps": steps, "unfinished": sched.has_requests() or bool(core.batch_queue)}


def mismatch(steps: list[dict[str, Any]], frames: list[dict[str, Any]]) -> str | None:
    """Where the adapter's iteration frames differ from vLLM's decisions, or None."""
    if len(steps) != len(frames):
        return f"{len(frames)} frames for {len(steps)} engine steps"
    for i, (want, it) in enumerate(zip(steps, frames, strict=True)):
        plan = want["plan"] or {"scheduled": {}, "preempted": []}
        got: dict[str, Any] = {
            "plan": [(x["req"], x["n"]) for x in it["scheduled"]],
            "preempted": sorted(p["req"] for p in it["preempted"]),
            "finished": sorted(f["req"] for f in it["finished"]),
        }
        expect: dict[str, Any] = {
            "plan": list(plan["scheduled"].items()),
            "preempted": plan["preempted"],
            "finished": want["finished"],
        }
        if want["plan"] is not None:
            got["queues"] = (it["queues"]["running"], it["queues"]["waiting"])
            got["reasons"] = len(it["waiting_reasons"])
            expect["queues"] = (plan["num_running"], plan["num_waiting"])
            expect["reasons"] = plan["num_waiting"]
        for key, value in expect.items():
            if got[key] != value:
                return f"step {i}: {key} {got[key]} != vLLM's {value}"
    return None


def observe(scenario: Scenario, async_loop: bool) -> tuple[str | None, list[str]]:
    """The adapter installed by class name, in the loop: (None when every frame equals
    vLLM's decision and nothing failed in the observer, else what differs; the
    observations it degraded on this release, compat.Degraded)."""
    sched = build(scenario, async_loop)
    want = "ObservedAsyncScheduler" if async_loop else "ObservedScheduler"
    if type(sched).__name__ != want:
        return f"--scheduler-cls built {type(sched).__name__}, not {want}", []
    sender = sched.batchscope
    if sender is None:
        return "the adapter did not start", []
    result = run(scenario, async_loop, sched)
    sched.close(0.5)
    degraded = sorted(sched._bs_lay.degraded)
    frames = [json.loads(text) for _, text in sender.frames.history]
    its = [f["data"] for f in frames if f["type"] == "iteration"]
    if result["unfinished"]:
        return "the run did not finish within max_steps", degraded
    if sched.observer_errors:
        return f"{sched.observer_errors} observer errors", degraded
    return mismatch(result["steps"], its), degraded


def decisions(scenario: Scenario, async_loop: bool, cls: type | None) -> list[dict[str, Any]]:
    """vLLM's per-step decisions in the loop, under `cls` (None: vLLM's own class)."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    plain = AsyncScheduler if async_loop else Scheduler
    sched = build(scenario, async_loop, cls or plain)
    steps: list[dict[str, Any]] = run(scenario, async_loop, sched)["steps"]
    if cls is not None and hasattr(sched, "close"):
        sched.close(0.5)
    return steps


def fault_case(scenario: Scenario, async_loop: bool, hook: str) -> str | None:
    """tools/vllm_fault_drive.py's case in the loop: the observation in `hook` raises at
    its FAIL_AT-th call; vLLM's decisions must equal its own scheduler's, the observer
    count one error and detach. None when so; else what went wrong."""
    import time

    from batchscope_vllm import ObservedAsyncScheduler, ObservedScheduler
    from tools.vllm_fault_drive import HOOKS, _fail_frames, _failing

    reference = decisions(scenario, async_loop, None)
    base = ObservedAsyncScheduler if async_loop else ObservedScheduler
    method = HOOKS[hook]
    sched = build(scenario, async_loop, _failing(base, method) if method else base)
    sender = sched.batchscope
    if method is None:
        _fail_frames(sched)
    observed = run(scenario, async_loop, sched)["steps"]
    deadline = time.monotonic() + 60.0  # the sender thread fails in its own time
    while (sender.failed is None or sched._bs_put is not None) and time.monotonic() < deadline:
        time.sleep(0.01)
    detached = sched._bs_put is None
    errors = sched.observer_errors
    sched.close(5.0)
    if observed != reference:
        return "vLLM decided differently with the failing observer"
    if errors != 1 or not detached:
        return f"{errors} observer errors, detached={detached}"
    return None


if __name__ == "__main__":
    os.environ.setdefault("BATCHSCOPE_URL", "ws://127.0.0.1:9/ws/ingest")  # nothing listens
    from engine.scenario import load_scenario

    for arg in sys.argv[1:]:
        s = load_scenario(arg)
        for loop in (False, True):
            print(arg, "async" if loop else "sync", observe(s, loop))
