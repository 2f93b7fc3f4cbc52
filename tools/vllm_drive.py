"""Drive a REAL vLLM 0.20.0 scheduler through a batchscope scenario, step by step, in the
engine loop vLLM would run it in (imported by tools/vllm_reference.py, vLLM's venv only):

* sync: `EngineCore.step` (schedule -> execute -> update_from_output), then `post_step`,
  which hands the drafter's proposals to `update_draft_token_ids` (speculative decoding);
* async: `AsyncScheduler` behind `EngineCore.step_with_batch_queue` with a batch queue of 2
  and a device that is never done when the loop looks.

The runner is the scenario token rule applied to the runner's own view (tokens of batches
in flight included), the drafter and verifier those of docs/scenarios.md. Each step's
record has the shape of `engine.result_fold.step_record`'s records, without waiting_reasons.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

from vllm.sampling_params import SamplingParams
from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus

from engine.result_fold import empty_request_record, step_timing
from engine.runner.sim import sim_drafts, sim_token, verify_drafts
from engine.scenario import Scenario

Rejector = Callable[[Scenario, int, int], str | None]


class _Batch:
    """One scheduled batch: vLLM's SchedulerOutput, the runner's output, bookkeeping."""

    def __init__(self, step: int, out: Any, runner_output: ModelRunnerOutput) -> None:
        self.step = step
        self.out = out
        self.runner_output = runner_output
        self.spec = {rid: len(t) for rid, t in out.scheduled_spec_decode_tokens.items() if t}


class Driver:
    def __init__(self, sched: Any, scenario: Scenario, block_hasher: Any, reject: Rejector):
        self.sched = sched
        self.scenario = scenario
        self.block_hasher = block_hasher
        self.reject = reject
        self.pool = sched.kv_cache_manager.block_pool
        self.usable = scenario.config.cache.num_gpu_blocks - 1
        self.num_spec = scenario.config.scheduler.num_speculative_tokens
        self.requests = {r.id: empty_request_record(r) for r in scenario.requests}
        self.live: dict[str, Request] = {}
        self.failure: dict[str, Any] | None = None
        """Set when vLLM's scheduler fails an assertion: its step and condition."""
        self.steps: list[dict[str, Any]] = []
        self.step_us: list[float] = []
        self.num_arrivals = 0
        self.queue: deque[_Batch] = deque()

    # ----------------------------------------------------------------- arrivals
    def add_arrivals(self, step: int, arrivals: list[Any]) -> list[str]:
        arrived: list[str] = []
        for r in arrivals:
            reason = self.reject(
                self.scenario, len(r.prompt_token_ids), r.sampling_params.max_tokens
            )
            if reason is not None:
                rec = self.requests[r.id]
                rec["finish_step"] = step
                rec["finish_reason"] = "rejected"
                rec["reject_reason"] = reason
                continue
            request = Request(
                request_id=r.id,
                prompt_token_ids=list(r.prompt_token_ids),
                sampling_params=SamplingParams(
                    max_tokens=r.sampling_params.max_tokens, ignore_eos=True, temperature=0.0
                ),
                pooling_params=None,
                arrival_time=float(self.num_arrivals),
                priority=r.priority,
                block_hasher=self.block_hasher,
            )
            self.num_arrivals += 1
            self.sched.add_request(request)
            self.live[r.id] = request
            arrived.append(r.id)
        return arrived

    # --------------------------------------------------------------- the runner
    def execute(self, out: Any) -> ModelRunnerOutput:
        """Sample from the runner's view: known tokens + tokens of batches in flight."""
        pending: dict[str, list[int]] = defaultdict(list)
        for batch in reversed(self.queue):  # oldest first
            ro = batch.runner_output
            for rid, i in output_index(ro).items():
                pending[rid].extend(ro.sampled_token_ids[i])
        req_ids = list(out.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for rid in req_ids:
            req = self.live[rid]
            drafts = out.scheduled_spec_decode_tokens.get(rid) or []
            if req.is_prefill_chunk:
                sampled.append([])
                continue
            position = req.num_computed_tokens - len(drafts)
            view = list(req.all_token_ids) + pending.get(rid, [])
            last = view[position - 1]
            if drafts:
                sampled.append(verify_drafts(last, position, drafts))
            else:
                sampled.append([sim_token(last, position)])
        return runner_output(req_ids, sampled)

    # ------------------------------------------------------------------ records
    def schedule(self, step: int) -> tuple[_Batch, dict[str, Any], float]:
        sched = self.sched
        status_before = {rid: req.status for rid, req in self.live.items()}
        sched.preempt_log.clear()
        t0 = time.perf_counter()
        out = sched.schedule()
        t1 = time.perf_counter()
        scheduled = dict(out.num_scheduled_tokens)
        new_ids: list[str] = []
        resumed_ids: list[str] = []
        hits: dict[str, int] = {}
        for rid, n in scheduled.items():
            before = status_before.get(rid)
            if before in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
                (new_ids if before == RequestStatus.WAITING else resumed_ids).append(rid)
                hits[rid] = self.live[rid].num_computed_tokens - n
        # The V1 model runner gets resumed requests as cached ones flagged resumed; the V2
        # runner (0.33's default) gets them in scheduled_new_reqs, like new ones.
        listed_new = {d.req_id for d in out.scheduled_new_reqs}
        listed_resumed = set(getattr(out.scheduled_cached_reqs, "resumed_req_ids", None) or ())
        assert set(new_ids) <= listed_new, (new_ids, out)
        assert listed_new | listed_resumed == set(new_ids) | set(resumed_ids), (resumed_ids, out)
        assert set(sched.preempt_log) == set(out.preempted_req_ids)
        num_running, num_waiting = sched.get_request_counts()
        batch = _Batch(step, out, self.execute(out))
        rec = {
            "scheduled": scheduled,
            "new_req_ids": new_ids,
            "resumed_req_ids": resumed_ids,
            "preempted_req_ids": list(sched.preempt_log),
            "prefix_cache_hit_tokens": hits,
            "num_running": num_running,
            "num_waiting": num_waiting,
            "kv_blocks_used": self.usable - self.pool.get_num_free_blocks(),
            "scheduled_spec_tokens": dict(batch.spec),
        }
        for rid in new_ids:
            r = self.requests[rid]
            if r["first_scheduled_step"] is None:
                r["first_scheduled_step"] = step
            if r["prefix_cache_hit_tokens_first_admission"] is None:
                r["prefix_cache_hit_tokens_first_admission"] = hits[rid]
        for rid in sched.preempt_log:
            self.requests[rid]["num_preemptions"] += 1
        return batch, rec, t1 - t0

    def idle_record(self) -> dict[str, Any]:
        num_running, num_waiting = self.sched.get_request_counts()
        return {
            "scheduled": {},
            "new_req_ids": [],
            "resumed_req_ids": [],
            "preempted_req_ids": [],
            "prefix_cache_hit_tokens": {},
            "num_running": num_running,
            "num_waiting": num_waiting,
            "kv_blocks_used": self.usable - self.pool.get_num_free_blocks(),
            "scheduled_spec_tokens": {},
        }

    def update(self, step: int, batch: _Batch) -> tuple[dict[str, Any], float, list[str]]:
        """Apply a batch's output; returns the update's record fields, the time it took and
        the drafter's list (requests of the batch that got tokens, in batch order)."""
        sched = self.sched
        ro = batch.runner_output
        generated = {rid: len(ro.sampled_token_ids[i]) for rid, i in output_index(ro).items()}
        t0 = time.perf_counter()
        engine_outputs = sched.update_from_output(batch.out, ro)
        elapsed = time.perf_counter() - t0
        sampled: list[str] = []
        finished: list[str] = []
        appended: dict[str, int] = {}
        accepted: dict[str, int] = {}
        for eco in engine_outputs.values():
            for o in eco.outputs:
                rid = o.request_id
                if o.new_token_ids:
                    sampled.append(rid)
                    appended[rid] = len(o.new_token_ids)
                if o.finish_reason is not None:
                    finished.append(rid)
        for rid, n_draft in batch.spec.items():
            if generated.get(rid) and rid in appended:
                accepted[rid] = generated[rid] - 1
                self.requests[rid]["num_draft_tokens"] += n_draft
                self.requests[rid]["num_accepted_tokens"] += generated[rid] - 1
        for rid in sampled:
            if self.requests[rid]["first_token_step"] is None:
                self.requests[rid]["first_token_step"] = step
        for rid in finished:
            req = self.live.pop(rid)
            r = self.requests[rid]
            r["finish_step"] = step
            r["finish_reason"] = str(req.get_finished_reason())
            r["num_output_tokens"] = req.num_output_tokens
            r["output_token_ids"] = list(req.output_token_ids)
        num_running_end, num_waiting_end = sched.get_request_counts()
        rec = {
            "updated_step": batch.step,
            "sampled_req_ids": sampled,
            "finished_req_ids": finished,
            "num_running_end": num_running_end,
            "num_waiting_end": num_waiting_end,
            "kv_blocks_used_end": self.usable - self.pool.get_num_free_blocks(),
            "accepted_tokens": accepted,
            "appended_tokens": appended,
        }
        return rec, elapsed, sampled

    def no_update_record(self) -> dict[str, Any]:
        num_running, num_waiting = self.sched.get_request_counts()
        return {
            "updated_step": None,
            "sampled_req_ids": [],
            "finished_req_ids": [],
            "num_running_end": num_running,
            "num_waiting_end": num_waiting,
            "kv_blocks_used_end": self.usable - self.pool.get_num_free_blocks(),
            "accepted_tokens": {},
            "appended_tokens": {},
        }

    def propose(self, drafted: list[str], all_live: dict[str, Request]) -> float:
        """vLLM's post_step: the drafter's proposals for the batch's requests that got
        tokens go to update_draft_token_ids (finished ones are ignored there). Returns the
        seconds update_draft_token_ids took."""
        drafts = [
            sim_drafts(list(all_live[rid].all_token_ids), k, self.num_spec)
            for k, rid in enumerate(drafted)
        ]
        t0 = time.perf_counter()
        self.sched.update_draft_token_ids(DraftTokenIds(drafted, drafts))
        return time.perf_counter() - t0

    # ------------------------------------------------------------------- loops
    def step_sync(self, step: int) -> dict[str, Any]:
        batch, rec, t_sched = self.schedule(step)
        requests_before = dict(self.live)
        upd, t_upd, drafted = self.update(step, batch)
        if self.num_spec and batch.out.total_num_scheduled_tokens > 0:
            t_upd += self.propose(drafted, requests_before)
        self.step_us.append((t_sched + t_upd) * 1e6)
        return {**rec, **upd}

    def step_async(self, step: int) -> dict[str, Any]:
        sched = self.sched
        queue = self.queue
        rec: dict[str, Any] | None = None
        t_sched = 0.0
        if sched.has_requests():
            batch, rec, t_sched = self.schedule(step)
            queue.appendleft(batch)
            if batch.out.total_num_scheduled_tokens > 0 and len(queue) < 2:
                self.step_us.append(t_sched * 1e6)
                return {**rec, **self.no_update_record()}
        if rec is None:
            rec = self.idle_record()
        if not queue:
            self.step_us.append(t_sched * 1e6)
            return {**rec, **self.no_update_record()}
        upd, t_upd, _ = self.update(step, queue.pop())
        self.step_us.append((t_sched + t_upd) * 1e6)
        return {**rec, **upd}

    def run(self, async_scheduling: bool) -> dict[str, Any]:
        scenario = self.scenario
        arrivals: dict[int, list[Any]] = defaultdict(list)
        for req in scenario.requests:
            arrivals[req.arrival_step].append(req)
        last_arrival = max(arrivals, default=-1)
        step = 0
        while step < scenario.max_steps:
            arrived = self.add_arrivals(step, arrivals.get(step, []))
            if not self.sched.has_unfinished_requests() and step >= last_arrival and not self.queue:
                break
            try:
                rec = self.step_async(step) if async_scheduling else self.step_sync(step)
            except AssertionError as exc:
                # vLLM's engine stops at a failed assertion: the run ends at this step.
                self.failure = {"step": step, "assertion": failed_assertion(exc)}
                break
            self.steps.append({"step": step, "arrived": arrived, **rec})
            step += 1
        return self.result()

    def result(self) -> dict[str, Any]:
        steps = self.steps
        requests = self.requests
        overheads = sorted(self.step_us)
        return {
            "scenario": self.scenario.name,
            "num_steps": len(steps),
            "total_draft_tokens": sum(r["num_draft_tokens"] for r in requests.values()),
            "total_accepted_tokens": sum(r["num_accepted_tokens"] for r in requests.values()),
            "total_scheduled_tokens": sum(sum(s["scheduled"].values()) for s in steps),
            "total_preemptions": sum(len(s["preempted_req_ids"]) for s in steps),
            "completed": sum(
                1 for r in requests.values() if r["finish_reason"] in ("stop", "length")
            ),
            "steps": steps,
            "requests": requests,
            "timing": step_timing(overheads),
            **({"failure": self.failure} if self.failure else {}),
        }


def failed_assertion(exc: AssertionError) -> str:
    """The condition of the `assert` that raised `exc`, as its source line spells it."""
    frames = traceback.extract_tb(exc.__traceback__)
    line = (frames[-1].line or "").strip() if frames else ""
    return line.removeprefix("assert ").split(",")[0].strip() or repr(exc)


_HAS_INDEX = "req_id_to_index" in {f.name for f in dataclasses.fields(ModelRunnerOutput)}
"""vLLM 0.20 .. 0.33's ModelRunnerOutput maps each request to its row; 0.34's does not."""


def output_index_of(req_ids: list[str]) -> dict[str, int]:
    return {rid: i for i, rid in enumerate(req_ids)}


def output_index(ro: ModelRunnerOutput) -> dict[str, int]:
    """Each request's row in `ro` (its req_ids order, where the release has no map)."""
    index: dict[str, int] | None = getattr(ro, "req_id_to_index", None)
    return index if index is not None else output_index_of(list(ro.req_ids))


def runner_output(req_ids: list[str], sampled: list[list[int]]) -> ModelRunnerOutput:
    """vLLM's ModelRunnerOutput for `sampled` tokens per request (no logprobs, no pooling)."""
    # 0.34 dropped req_id_to_index (a request's row is its place in req_ids).
    index = {"req_id_to_index": output_index_of(req_ids)} if _HAS_INDEX else {}
    return ModelRunnerOutput(
        req_ids=req_ids,
        **index,
        sampled_token_ids=sampled,
        logprobs=None,
        prompt_logprobs_dict={},
        pooler_output=[],
    )


def plain_output(sched: Any, out: Any) -> ModelRunnerOutput:
    """The scenario token rule without drafts: a token for each request whose scheduled
    tokens reach its end, nothing for a partial prefill chunk."""
    req_ids = list(out.num_scheduled_tokens)
    sampled = []
    for rid in req_ids:
        req = sched.requests[rid]
        done = req.num_computed_tokens == req.num_tokens
        sampled.append([sim_token(req.all_token_ids[-1], req.num_tokens)] if done else [])
    return runner_output(req_ids, sampled)
