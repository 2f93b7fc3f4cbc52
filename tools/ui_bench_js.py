"""The in-page halves of tools/ui_bench.py (JavaScript run by Playwright)."""

from __future__ import annotations

# requestAnimationFrame callbacks per second over `secs`, plus what each renderer cost.
FPS_JS = """secs => new Promise(done => {
  const p0 = JSON.parse(JSON.stringify(batchscope.perf)); const f0 = batchscope.conn.frames;
  const s0 = batchscope.model.step;
  let n = 0, worst = 0; const t0 = performance.now(); let prev = t0;
  function tick(t) {
    n++; worst = Math.max(worst, t - prev); prev = t;
    if (t - t0 < secs * 1000) { requestAnimationFrame(tick); return; }
    const ms = {};
    const perf = batchscope.perf;
    for (const k in perf) ms[k] = +(perf[k].ms - ((p0[k] || {}).ms || 0)).toFixed(1);
    done({fps: n * 1000 / (t - t0), worst_frame_ms: worst,
          frames_folded: batchscope.conn.frames - f0,
          steps: batchscope.model.step - s0, running: batchscope.model.queues.running,
          requests: batchscope.model.order.length, main_thread_ms: ms});
  }
  requestAnimationFrame(tick);
})"""

# When the timeline first showed `n` rows: ms since navigation start (the frame after
# the draw), and how long that draw took.
FIRST_PAINT_JS = """n => new Promise(done => {
  const el = document.getElementById("gantt");
  function check() {
    if (el.dataset.shownRows === String(n)) {
      const nav = performance.getEntriesByType("navigation")[0] || {};
      const c = batchscope.conn, r = (x) => Math.round(x);
      done({first_paint_ms: +el.dataset.shownAt, draw_ms: +el.dataset.renderMs,
            dom_ready_ms: r(nav.domContentLoadedEventEnd || 0), ws_open_ms: r(c.openAt),
            snapshot_at_ms: r(c.snapshotAt), parse_ms: r(c.parseMs), fold_ms: r(c.foldMs),
            draws: batchscope.timeline.view.draws});
      return;
    }
    setTimeout(check, 20);
  }
  check();
})"""

# Parse a snapshot (JSON text, as a socket message), fold it into the page's model and
# draw all its rows; ms until the frame after the draw begins.
PAINT_SNAPSHOT_JS = """text => new Promise(done => {
  const t0 = performance.now();
  batchscope.model.loadSnapshot(JSON.parse(text));
  const t1 = performance.now();
  batchscope.timeline.view.draw();
  const t2 = performance.now();
  requestAnimationFrame(() => setTimeout(() => done({ms: performance.now() - t0,
    fold_ms: t1 - t0, draw_ms: t2 - t1, rows: +document.getElementById("gantt").dataset.rows}), 0));
})"""

# Apply a query and redraw the timeline: ms of the filter and the draw.
FILTER_JS = """q => {
  const t0 = performance.now();
  batchscope.filters.set(q);
  const n = batchscope.filters.ids(batchscope.model).length;
  batchscope.timeline.view.draw();
  return {ms: performance.now() - t0, rows: n};
}"""

# 500 running requests generated in the page (no server competing for the CPU): 25
# messages a second of 4 steps each, every request decoding one token per step.
SYNTHETIC_JS = """secs => new Promise(done => {
  const N = 500, reqs = [];
  for (let i = 0; i < N; i++) {
    reqs.push({req: "req-" + i, status: "RUNNING", num_prompt_tokens: 64, num_tokens: 65,
      num_computed_tokens: 64, max_tokens: 100000, priority: 0, num_preemptions: 0,
      prefix_hit: 0, arrived_step: 0, arrived_t: 0, first_scheduled_step: 1,
      first_token_t: 0.01, finish_step: null, finish_reason: null, waiting_reason: null,
      segments: [["waiting", 0, 0, 0], ["prefill", 1, 1, 64], ["decode", 2, 2, 1]]});
  }
  const blocks = []; for (let b = 1; b <= 4096; b++) blocks.push([b, "used", "req-" + (b % N), 1]);
  batchscope.model.loadSnapshot({type: "snapshot", session: "synthetic", seq: 1, data: {
    session: "synthetic", meta: {}, step: 2, t: 0.01, config: {}, config_version: 0,
    paused: false, simulated: true, requests: reqs, blocks: blocks, history: [], totals: {}}});
  const sched = [];
  for (let i = 0; i < N; i++) sched.push({req: "req-" + i, n: 1, start: 64, phase: "decode",
    prefix_hit: 0, sample: true});
  const sampled = sched.map(s => s.req);
  let step = 3;
  const timer = setInterval(() => {
    for (let k = 0; k < 4; k++, step++) {
      batchscope.model.seq++;
      const seq = batchscope.model.seq;
      batchscope.model.apply({type: "iteration", session: "synthetic", seq: seq, data: {
        step: step, t_start: step * 0.01, duration: 0.01, forward_ms: 9, overhead_us: 50,
        simulated: true, scheduled: sched, new: [], resumed: [], preempted: [], finished: [],
        arrived: [], rejected: [], sampled: sampled, updated_step: step,
        queues: {running: N, waiting: 0, running_end: N, waiting_end: 0},
        budget: {max_tokens: 2048, used: N, max_seqs: 512, prefill: 0, decode: N},
        kv: {total: 4096, used: 3000, cached_free: 10, hit_tokens: 0, used_end: 3000},
        blocks: [[1 + step % 4096, "used", "req-" + (step % N), 1]],
        waiting_reasons: {}, config_version: 0}});
    }
    batchscope.schedule();
  }, 40);
  let n = 0; const t0 = performance.now();
  function tick(t) {
    n++;
    if (t - t0 < secs * 1000) { requestAnimationFrame(tick); return; }
    clearInterval(timer);
    done({fps: n * 1000 / (t - t0), steps: step});
  }
  requestAnimationFrame(tick);
})"""

# An hour of a node folded into the page as fast as it goes (no drawing): 25 steps a
# second (90,000 steps), 10 arrivals a second (36,000 requests) each decoding 200 steps.
# The caller samples the JS heap (after a collection) at each quarter.
HOUR_JS = """([steps, part]) => {
  const m = batchscope.model;
  if (part === 0) {
    m.loadSnapshot({type: "snapshot", session: "hour", seq: 1, data: {session: "hour",
      meta: {}, step: -1, t: 0, config: {}, config_version: 0, paused: false, simulated: true,
      requests: [], blocks: [], history: [], totals: {}}});
    window.__hour = {step: 0, next: 0, live: []};
  }
  const h = window.__hour;
  const end = h.step + steps;
  for (; h.step < end; h.step++) {
    const s = h.step, arrived = [], finished = [], sched = [];
    if (s % 5 === 0) {
      for (let k = 0; k < 2; k++) {
        const id = "r" + h.next++;
        arrived.push(id);
        h.live.push([id, s]);
      }
    }
    const keep = [];
    for (const [id, a] of h.live) {
      if (s - a >= 200) { finished.push({req: id, reason: "length"}); continue; }
      keep.push([id, a]);
      sched.push({req: id, n: 1, start: 64 + s - a, phase: s === a ? "prefill" : "decode",
        prefix_hit: 0, sample: true});
    }
    h.live = keep;
    const n = sched.length;
    m.seq++;
    m.apply({type: "iteration", session: "hour", seq: m.seq, data: {step: s, t_start: s * 0.04,
      duration: 0.04, forward_ms: 30, overhead_us: 100, simulated: true, scheduled: sched,
      new: arrived, resumed: [], preempted: [], finished: finished, arrived: arrived,
      rejected: [], sampled: sched.map(x => x.req), updated_step: s,
      queues: {running: n, waiting: 0, running_end: n, waiting_end: 0},
      budget: {max_tokens: 4096, used: n, max_seqs: 512, prefill: 0, decode: n},
      kv: {total: 8192, used: 4000, cached_free: 0, hit_tokens: 0, used_end: 4000},
      blocks: [[1 + s % 8192, "used", n ? sched[0].req : null, 1]],
      waiting_reasons: {}, config_version: 0}});
    for (const f of finished) {
      m.seq++;
      m.apply({type: "request", session: "hour", seq: m.seq, data: {req: f.req,
        kind: "finished", step: s, t: s * 0.04 + 0.04, detail: {reason: "length"}}});
    }
  }
  return {step: h.step, requests: m.order.length, reqs: m.reqs.size};
}"""
