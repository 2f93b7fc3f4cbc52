/* model.js: Model, the browser-side fold of protocol-v1 frames (docs/protocol.md).
 * It mirrors app/frames/fold.py so a snapshot and the frames after it give the same picture.
 * Segments are [kind, step_start, step_end (inclusive, null = still open), tokens, hit].
 * Renderers read it; append-only series carry an absolute index (base + position) so
 * each renderer can draw only what it has not drawn yet, and `epoch` changes on reset. */
import {
  END_MARKS, FRAME, HISTORY_STEPS, MARK, PHASE, SEGMENT, SESSION_EVENT, STATUS, newRow,
  rowFromColumns,
} from "./protocol.js";
// The codes the frames carry, a new row, the marks that end a request and the history's
// length: static/js/protocol.js, generated from protocol/ and app/frames/.
const SEG = SEGMENT;
// Bounds that keep the page's memory flat over an hour-long session: finished rows past
// MAX_REQUESTS go (oldest first), per-row draft marks past MAX_MARKS, times past MAX_TIMES;
// the chart keeps as many steps as a snapshot carries.
const MAX_REQUESTS = 20000;
const MAX_MARKS = 256;
const MAX_HISTORY = HISTORY_STEPS;
const MAX_STEP_ROWS = 2000;
const MAX_TIMES = 20000;

class Series {
  constructor(cap) { this.cap = cap; this.items = []; this.base = 0; }
  push(x) {
    this.items.push(x);
    if (this.items.length > this.cap * 1.25) {
      const drop = this.items.length - this.cap;
      this.items.splice(0, drop);
      this.base += drop;
    }
  }
  get end() { return this.base + this.items.length; }
  since(abs) { return this.items.slice(Math.max(0, abs - this.base)); }
}
export { Series };

class Model {
  constructor() { this.epoch = 0; this.reset(null); }

  reset(session) {
    this.session = session;
    this.seq = 0;
    this.epoch++;
    this.meta = {};
    this.step = -1;
    this.config = {};
    this.configVersion = 0;
    this.paused = false;
    this.simulated = false;
    this.reasons = new StepReasons();
    this.reqs = new Rows(this.reasons); // a Map whose get() resolves the waiting reason
    this.order = []; // req ids in arrival order
    this.blocks = []; // index block_id -> [state, owner, ref_cnt]
    this.blockDirty = new Set();
    this.blocksAll = true;
    this.kvTotal = 0;
    this.history = new Series(MAX_HISTORY); // per-step chart points
    this.steps = new Series(MAX_STEP_ROWS); // step-table rows (steps with work)
    this.totalTokens = 0;
    this.markers = []; // {step, label}
    this.tStart = new Map();
    this.tEnd = new Map();
    this.queues = { running: 0, waiting: 0 };
    this.inFlight = new Set(); // async: requests with output placeholders
    this.waitingDetail = {}; // the numbers behind the latest waiting reasons
    this.batches = []; // async: steps whose batch output is not applied yet (oldest first)
    this.lastUpdate = null; // {step, updated_step} of the latest iteration
    this.ganttVersion = 0; // bumped on every change that moves a Gantt bar
    // What the snapshot left out (a compact one: this viewer fell behind; or finished rows
    // past the server's bound): {requests, steps, from_step}, null if nothing. The
    // recording holds the rest (request_pages.js pages it; the page says so).
    this.leftOut = null;
    this.requestsBefore = 0; // requests of the session the snapshot did not carry
    this.trimmed = 0; // finished rows this page let go (MAX_REQUESTS)
  }

  /** Every request of the session: the server's count at the snapshot, plus the new
   * ones since (never the length of a list something was left out of). */
  numRequests() { return this.requestsBefore + this.trimmed + this.order.length; }

  // ------------------------------------------------------------- snapshot
  loadSnapshot(f) {
    this.reset(f.session);
    this.seq = f.seq || 0;
    const d = f.data;
    if (!d) return;
    this.meta = d.meta || {};
    this.step = d.step;
    this.config = d.config || {};
    this.configVersion = d.config_version || 0;
    this.paused = !!d.paused;
    this.simulated = !!d.simulated;
    this.waitingDetail = d.waiting_detail || {};
    // The rows are taken over (the parsed snapshot is not used after this).
    for (const row of rowsOf(d.requests)) {
      row.num_draft_tokens = row.num_draft_tokens || 0;
      row.num_accepted_tokens = row.num_accepted_tokens || 0;
      row.placeholders = row.placeholders || 0;
      row.marks = []; // [step, kind, a, b]: draft (spec, accepted), skip, late
      if (row.placeholders) this.inFlight.add(row.req);
      row.segs = row.segments || [];
      row.segments = undefined;
      for (const seg of row.segs) seg[4] = 0;
      this._openLast(row);
      if (row.prefix_hit) this._markHit(row);
      this.reqs.set(row.req, row);
      this.order.push(row.req);
    }
    for (const b of d.blocks || []) this.blocks[b[0]] = [b[1], b[2], b[3]];
    this.kvTotal = (d.blocks || []).length;
    for (const m of d.config_marks || []) this.markers.push(marker(m.step, m.changes));
    let total = 0;
    for (const h of d.history || []) {
      this.tEnd.set(h.step, h.t);
      this.history.push(h);
      if (h.plan && hasKeys(h.plan)) {
        const n = sumValues(h.plan);
        total += n;
        // The plan stays {req: n} until the step table shows it (pairs from frames).
        this.steps.push({ step: h.step, plan: h.plan, total: n,
          preempted: h.preempted_ids || [], finished: h.finished || [],
          updated: h.updated_step === undefined ? h.step : h.updated_step });
      }
    }
    this.totalTokens = (d.totals && d.totals.scheduled_tokens) || total;
    this.leftOut = d.left_out || null;
    const known = d.totals && d.totals.requests;
    this.requestsBefore = typeof known === "number" ? Math.max(0, known - this.order.length) : 0;
    const last = this.history.items[this.history.items.length - 1];
    if (last) this.queues = { running: last.running, waiting: last.waiting };
    if (last && last.kv_total) this.kvTotal = Math.max(this.kvTotal, last.kv_total);
    this.ganttVersion++;
  }

  // A snapshot closes open segments at the current step; reopen the one still running.
  _openLast(row) {
    const last = row.segs[row.segs.length - 1];
    if (!last || row.status === STATUS.FINISHED || row.status === STATUS.REJECTED) return;
    if (last[0] === SEG.WAITING || last[0] === SEG.PREEMPTED) last[2] = null;
  }
  _markHit(row) {
    const first = row.segs.find((s) => s[0] === SEG.PREFILL);
    if (first) first[4] = row.prefix_hit;
  }

  _row(req, step) {
    let row = this.reqs.get(req);
    if (!row) {
      const s = Math.max(step, 0);
      row = newRow(req, s, null); // its arrival time comes with its `arrived` mark
      row.marks = [];
      row.segs = [[SEG.WAITING, s, null, 0, 0]];
      this.reqs.set(req, row);
      this.order.push(req);
      if (this.order.length > MAX_REQUESTS * 1.1) this._trim();
    }
    return row;
  }
  _trim() {
    const keep = [];
    let excess = this.order.length - MAX_REQUESTS;
    for (const id of this.order) {
      const r = this.reqs.get(id);
      if (excess > 0 && r && r.finish_step !== null) { this.reqs.delete(id); excess--; this.trimmed++; }
      else keep.push(id);
    }
    this.order = keep;
  }
  _close(row, step) {
    const last = row.segs[row.segs.length - 1];
    if (last && last[2] === null) {
      if (step - 1 < last[1]) row.segs.pop(); else last[2] = step - 1;
    }
  }

  // ------------------------------------------------------------- frames
  /** Fold one frame; returns DOM events to dispatch [{name, detail}]. */
  apply(f) {
    const d = f.data || {};
    if (f.type === FRAME.ITERATION) return this._iteration(d);
    if (f.type === FRAME.REQUEST) return this._request(d);
    if (f.type === FRAME.CONFIG) {
      this.config = Object.assign({}, d.config);
      this.configVersion = d.config_version;
      const m = marker(d.step, d.changes);
      this.markers.push(m);
      this.ganttVersion++;
      return [{ name: "bs:config", detail: { step: d.step, label: m.label, changes: d.changes } }];
    }
    if (f.type === FRAME.SESSION) {
      if (d.paused !== undefined) this.paused = !!d.paused;
      if (d.event === SESSION_EVENT.OPENED) Object.assign(this.meta, d);
      if (d.event === SESSION_EVENT.FAILED) {
        this.meta.failure = { step: d.step, assertion: d.assertion, detail: d.detail };
      }
      return [{ name: "bs:state", detail: { paused: this.paused, event: d.event } }];
    }
    return [];
  }

  _request(d) {
    const row = this._row(d.req, d.step);
    const det = d.detail || {};
    if (d.kind === MARK.ARRIVED) {
      row.num_prompt_tokens = row.num_tokens = det.num_prompt_tokens || 0;
      row.max_tokens = det.max_tokens || 0;
      row.priority = det.priority || 0;
      row.arrived_step = d.step;
      row.arrived_t = d.t;
      if (row.segs.length === 1 && row.segs[0][0] === SEG.WAITING) row.segs[0][1] = d.step;
      this.ganttVersion++;
      return [{ name: "bs:arrived", detail: { req: d.req } }];
    }
    if (d.kind === MARK.FIRST_TOKEN) row.first_token_t = d.t;
    const end = Object.hasOwn(END_MARKS, d.kind) ? END_MARKS[d.kind] : null;
    if (d.kind === MARK.REJECTED) {
      row.status = end[0]; row.finish_reason = det.reason || end[1];
      row.finish_step = d.step; row.segs = []; this.ganttVersion++;
    }
    if (d.kind === MARK.FINISHED || d.kind === MARK.ABORTED) {
      row.status = end[0];
      row.finish_reason = det.reason || end[1];
      row.finish_step = d.step;
      row.finish_t = d.t;
      this._close(row, d.step);
      this.ganttVersion++;
      return [{ name: "bs:finished", detail: { req: d.req, reason: row.finish_reason } }];
    }
    return [];
  }

  _iteration(d) {
    const step = d.step;
    this.step = step;
    this.simulated = !!d.simulated;
    this.tStart.set(step, d.t_start);
    this.tEnd.set(step, d.t_start + d.duration);
    if (this.tStart.size > MAX_TIMES) trimTimes(this.tStart, this.tEnd, step - MAX_TIMES / 2);
    for (const req of d.arrived) this._row(req, step);
    const plan = [];
    const accepted = d.accepted || {};
    const placeholders = d.placeholders || {};
    if (this.inFlight.size) this._skips(d, step);
    for (const it of d.scheduled) {
      const row = this._row(it.req, step);
      plan.push([it.req, it.n]);
      if (row.status !== STATUS.RUNNING) {
        this._close(row, step);
        row.status = STATUS.RUNNING;
        if (row.first_scheduled_step === null) {
          row.first_scheduled_step = step;
          row.prefix_hit = it.prefix_hit;
        }
      }
      row.waiting_reason = null;
      row.num_computed_tokens = it.start + it.n;
      if (it.spec) {
        row.num_draft_tokens += it.spec;
        addMark(row, [step, "draft", it.spec, accepted[it.req] || 0]);
      }
      const segs = row.segs;
      const last = segs[segs.length - 1];
      if (it.phase === PHASE.DECODE && last && last[0] === SEG.DECODE && last[2] === step - 1) {
        last[2] = step;
        last[3] += it.n;
      } else {
        segs.push([it.phase, step, step, it.n, it.phase === PHASE.PREFILL ? it.prefix_hit : 0]);
      }
    }
    for (const p of d.preempted) {
      const row = this._row(p.req, step);
      row.status = STATUS.PREEMPTED;
      row.num_preemptions++;
      row.num_computed_tokens = 0;
      row.segs.push([SEG.PREEMPTED, step, null, p.tokens_lost, 0]);
    }
    const appended = d.appended || {};
    const tEnd = d.t_start + d.duration;
    for (const req of d.sampled) {
      const r = this.reqs.get(req);
      if (!r) continue;
      r.num_tokens += appended[req] || 1;
      r.last_token_t = tEnd;
      // Async: the output of a batch still in flight when the request was preempted.
      if (r.status === STATUS.PREEMPTED || r.status === STATUS.WAITING) addMark(r, [step, "late"]);
    }
    for (const req in accepted) {
      const r = this.reqs.get(req);
      if (r) r.num_accepted_tokens += accepted[req];
    }
    for (const req of this.inFlight) {
      const r = this.reqs.get(req);
      if (r && !(req in placeholders)) r.placeholders = 0;
    }
    this.inFlight = new Set(Object.keys(placeholders));
    for (const req in placeholders) this._row(req, step).placeholders = placeholders[req];
    this.waitingDetail = d.waiting_detail || {};
    this._batches(d, step);
    for (const fin of d.finished) {
      const row = this._row(fin.req, step);
      row.status = STATUS.FINISHED; row.finish_reason = fin.reason; row.finish_step = step;
    }
    this.reasons.apply(d, this.reqs);
    for (const b of d.blocks) {
      this.blocks[b[0]] = [b[1], b[2], b[3]];
      this.blockDirty.add(b[0]);
    }
    if (d.kv.total > this.kvTotal) { this.kvTotal = d.kv.total; this.blocksAll = true; }
    this.queues = { running: d.queues.running_end, waiting: d.queues.waiting_end };
    this.history.push({ step: step, t: d.t_start + d.duration, prefill: d.budget.prefill,
      decode: d.budget.decode, max_tokens: d.budget.max_tokens, seqs: d.scheduled.length,
      max_seqs: d.budget.max_seqs, running: d.queues.running_end,
      waiting: d.queues.waiting_end, kv_used: d.kv.used_end, kv_cached: d.kv.cached_free,
      kv_total: d.kv.total, spec: d.spec_tokens || 0, accepted: sumValues(accepted),
      padding: d.padding || 0,
      updated_step: d.updated_step === undefined ? step : d.updated_step });
    if (plan.length) {
      this.totalTokens += d.budget.used;
      this.steps.push({ step: step, plan: plan, total: d.budget.used,
        preempted: d.preempted.map((p) => p.req), finished: d.finished.map((x) => x.req),
        updated: d.updated_step === undefined ? step : d.updated_step });
    }
    this.ganttVersion++;
    return d.finished.length ? [{ name: "bs:step-finished", detail: { step: step } }] : [];
  }

  // Async scheduling: a running request left out of this step because the tokens of its
  // batches in flight already reach max_tokens (the extra step vLLM avoids).
  _skips(d, step) {
    const planned = new Set(d.scheduled.map((it) => it.req));
    for (const req of this.inFlight) {
      const r = this.reqs.get(req);
      if (!r || r.status !== STATUS.RUNNING || planned.has(req)) continue;
      const outputs = r.num_tokens - r.num_prompt_tokens;
      if (r.max_tokens && outputs + r.placeholders >= r.max_tokens) addMark(r, [step, "skip"]);
    }
  }

  // The batch queue: steps whose output is still to be applied, and the latest update.
  _batches(d, step) {
    const updated = d.updated_step === undefined ? step : d.updated_step;
    if (updated !== step && d.scheduled.length) this.batches.push(step);
    const at = this.batches.indexOf(updated);
    if (at >= 0) this.batches.splice(0, at + 1);
    if (this.batches.length > 4) this.batches.splice(0, this.batches.length - 4);
    this.lastUpdate = { step: step, updated: updated };
  }

  /** Seconds since session start at the beginning of `step` (estimated if unseen). */
  timeOf(step) {
    let t = this.tStart.get(step);
    if (t !== undefined) return t;
    t = this.tEnd.get(step - 1);
    if (t !== undefined) return t;
    t = this.tEnd.get(step);
    return t !== undefined ? t : null;
  }
}

// Waiting reasons, as app/frames/step_reasons.py keeps them: a frame with
// `waiting_default` names only the exceptions to it, so the latest step's default and
// exceptions are kept and a waiting row's reason is resolved when the row is read (Rows.get;
// also just before a row stops waiting, since every change reads it first): a frame costs
// O(exceptions), not a write to every row of a long queue.
class StepReasons {
  constructor() { this.def = null; this.step = -1; this.exc = {}; }
  apply(d, rows) {
    const named = d.waiting_reasons;
    const def = d.waiting_default === undefined ? null : d.waiting_default;
    if (def === null && this.def !== null) {
      for (const row of rows.values()) this.resolve(row); // a full map after compact ones
      this.def = null; this.exc = {};
    }
    for (const req in named) {
      const row = rows.get(req);
      if (row) row.waiting_reason = named[req];
    }
    if (def !== null) { this.def = def; this.step = d.step; this.exc = named; }
  }
  resolve(row) {
    if (this.def === null || row.arrived_step > this.step) return;
    if (row.status !== STATUS.WAITING && row.status !== STATUS.PREEMPTED) return;
    row.waiting_reason = Object.hasOwn(this.exc, row.req) ? this.exc[row.req] : this.def;
  }
}
class Rows extends Map {
  constructor(reasons) { super(); this.reasons = reasons; }
  get(req) {
    const row = super.get(req);
    if (row !== undefined) this.reasons.resolve(row);
    return row;
  }
}
function trimTimes(a, b, below) {
  for (const m of [a, b]) for (const k of m.keys()) { if (k >= below) break; m.delete(k); }
}
/** Snapshot rows: a list of objects, or {columns, rows} (the compact form; the columns
 * of protocol/views.py's ROW_COLUMNS). rowFromColumns (generated) builds each
 * row as one object literal: every row gets the same shape at once (adding 22 keys one
 * by one is several times slower). */
function rowsOf(requests) {
  if (!requests) return [];
  if (Array.isArray(requests)) return requests;
  const at = {};
  requests.columns.forEach((c, k) => { at[c] = k; });
  return requests.rows.map((a) => rowFromColumns(a, at));
}
function addMark(row, m) {
  row.marks.push(m);
  if (row.marks.length > MAX_MARKS) row.marks.splice(0, row.marks.length - MAX_MARKS);
}
function sumValues(obj) { let n = 0; for (const k in obj) n += obj[k]; return n; }
function hasKeys(obj) { for (const k in obj) return true; return false; }
function marker(step, changes) {
  const parts = Object.keys(changes || {}).map((k) => k + "=" + changes[k]);
  return { step: step, label: (parts.join(", ") || "config") + " @ step " + step };
}
export { Model };
