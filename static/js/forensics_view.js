/* forensics_view.js: draws a request's life (GET /api/requests/{req}) into the panel:
 * summary and latency, the steps it was scheduled (prefill chunks one by one, decode runs
 * merged, drafts and how many were accepted), each wait with its reason in words with the
 * step's numbers, preemptions (tokens lost, who took the blocks, the recompute), async
 * outputs (which step's batch) and placeholders, the KV blocks it held and with whom they
 * were shared, and its text (or token ids). Built with DOM nodes and textContent only. */
import { PHASE } from "./protocol.js";
import { mode } from "./live.js";
const MAX_ROWS = 300;

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
function ms(x) { return x === null || x === undefined ? "–" : (x * 1000).toFixed(x < 0.01 ? 2 : 1) + " ms"; }
function steps(a, b) { return a === b ? "step " + a : "steps " + a + "–" + b; }

function section(body, title, id, count) {
  const s = el("section", "life-section");
  s.id = id;
  const h = el("h3", "", title);
  if (count !== undefined) h.appendChild(el("span", "hint", " " + count));
  s.appendChild(h);
  body.appendChild(s);
  return s;
}

function table(parent, head, rows, cls) {
  const t = el("table", "life-table " + (cls || ""));
  const tr = el("tr");
  for (const h of head) tr.appendChild(el("th", "", h));
  t.appendChild(el("thead")).appendChild(tr);
  const tb = t.appendChild(el("tbody"));
  for (const r of rows.slice(0, MAX_ROWS)) {
    const row = el("tr");
    if (r.cls) row.className = r.cls;
    if (r.data) for (const k in r.data) row.dataset[k] = r.data[k];
    for (const c of r.cells) row.appendChild(el("td", "", c));
    tb.appendChild(row);
  }
  parent.appendChild(t);
  if (rows.length > MAX_ROWS) parent.appendChild(el("p", "hint", "… " + (rows.length - MAX_ROWS) + " more"));
  return t;
}

/** Prefill chunks one per row; consecutive decode steps merged into a run. */
function runs(scheduled) {
  const out = [];
  for (const s of scheduled) {
    const last = out[out.length - 1];
    if (s.phase === PHASE.DECODE && last && last.phase === PHASE.DECODE && last.to === s.step - 1) {
      last.to = s.step; last.n += s.n; last.count++; last.spec += s.spec || 0;
      last.accepted += s.accepted || 0;
      continue;
    }
    out.push({ phase: s.phase, from: s.step, to: s.step, n: s.n, start: s.start, count: 1,
      hit: s.prefix_hit || 0, spec: s.spec || 0, accepted: s.accepted || 0, pad: s.pad || 0 });
  }
  return out;
}

function scheduledSection(body, life) {
  const rs = runs(life.scheduled);
  const s = section(body, "Scheduled", "life-scheduled", life.scheduled.length + " steps");
  const spec = life.modes.num_speculative_tokens > 0;
  const head = ["steps", "phase", "tokens", "positions", "prefix hit"].concat(spec ? ["drafts (accepted)"] : []);
  table(s, head, rs.map((r) => ({
    data: { phase: r.phase, from: r.from, to: r.to, n: r.n },
    cells: [steps(r.from, r.to), r.phase + (r.count > 1 ? " ×" + r.count : ""), r.n,
      r.start + "→" + (r.start + r.n), r.hit || ""].concat(spec ? [r.spec ? r.spec + " (" + r.accepted + ")" : ""] : []),
  })), "life-sched");
}

function waitsSection(body, life) {
  if (!life.waits.length) return;
  const total = life.waits.reduce((n, w) => n + w.to - w.from + 1, 0);
  const s = section(body, "Waiting", "life-waits", total + " steps");
  table(s, ["steps", "reason", "why"], life.waits.map((w) => ({
    data: { reason: w.reason, from: w.from, to: w.to },
    cells: [steps(w.from, w.to), w.reason, w.text + (w.variants ? " … " + w.last_text + " (" + w.variants + " variants)" : "")],
  })), "life-waits");
}

function preemptSection(body, life) {
  if (!life.preemptions.length) return;
  const s = section(body, "Preemptions", "life-preemptions", life.preemptions.length);
  table(s, ["step", "tokens lost", "blocks freed → taken by", "resumed", "recomputed"],
    life.preemptions.map((p) => ({ data: { step: p.step }, cells: [p.step, p.tokens_lost,
      p.blocks_freed + (p.blocks_taken_by.length ? " → " + p.blocks_taken_by.join(", ") : ""),
      p.resumed_step === null ? "not yet" : "step " + p.resumed_step + (p.resume_prefix_hit ? " (hit " + p.resume_prefix_hit + ")" : ""),
      p.recomputed_tokens + (p.recompute_steps ? " in " + steps(p.recompute_steps[0], p.recompute_steps[1]) : "")] })));
}

function outputsSection(body, life) {
  const n = life.outputs.reduce((k, o) => k + o.n, 0);
  const s = section(body, "Outputs", "life-outputs", n + " tokens");
  const async = life.modes.async_scheduling;
  if (async) {
    s.appendChild(el("p", "hint", "async scheduling: each step applies the output of an earlier " +
      "step's batch; placeholders stand for tokens still in flight."));
    table(s, ["applied at", "batch of step", "tokens"], life.outputs.map((o) => ({
      cls: o.batch !== o.step ? "late-batch" : "", cells: [o.step, o.batch, o.n] })));
    if (life.placeholders.length) {
      s.appendChild(el("p", "mono", "placeholders: " + life.placeholders.map((p) => "step " + p[0] + ": " + p[1]).join(", ")));
    }
  } else if (life.outputs.length) {
    s.appendChild(el("p", "mono", "at " + steps(life.outputs[0].step, life.outputs[life.outputs.length - 1].step)));
  }
}

function blocksSection(body, life) {
  if (!life.blocks.length) return;
  const own = life.blocks.filter((b) => b.own).length;
  const s = section(body, "KV blocks", "life-blocks", life.blocks.length + " held (" + own + " allocated, " +
    (life.blocks.length - own) + " prefix hits)");
  table(s, ["block", "steps", "how", "shared with"], life.blocks.map((b) => ({
    data: { block: b.block },
    cells: [b.block, b.to === null ? "from " + b.from : steps(b.from, b.to),
      b.own ? "allocated" : "prefix hit of " + (b.owner || "?"),
      b.shared_with.join(", ") + (b.inferred ? " (inferred)" : "") + (b.max_ref > 1 ? " · ref_cnt ≤ " + b.max_ref : "")] })));
}

/** Control characters (but newlines and tabs) as \xNN: random byte ids hold many. */
function visible(text) {
  let out = "";
  for (const ch of text) {
    const c = ch.charCodeAt(0);
    const control = (c < 32 && ch !== "\n" && ch !== "\t") || c === 127;
    out += control ? "\\x" + c.toString(16).padStart(2, "0") : ch;
  }
  return out;
}

function textSection(body, life) {
  const t = life.text;
  const s = section(body, "Text", "life-text");
  const ids = (a) => (a.length > 200 ? a.slice(0, 200).join(" ") + " … (" + a.length + ")" : a.join(" "));
  const pairs = [["prompt", t.prompt_text, t.prompt_token_ids], ["output", t.output_text, t.output_token_ids]];
  for (const [name, text, tokens] of pairs) {
    if (text === undefined && !tokens) continue;
    // Text a tokenizer could not decode (U+FFFD stands for bytes it dropped): its ids.
    const unreadable = text !== undefined && text.indexOf("\uFFFD") >= 0 && tokens;
    const title = text === undefined ? " token ids"
      : unreadable ? " token ids (" + tokens.length + "; the text is not valid UTF-8)" : "";
    s.appendChild(el("h4", "", name + title));
    s.appendChild(el("pre", "life-text " + name,
      text !== undefined && !unreadable ? visible(text) : ids(tokens)));
  }
  if (s.childElementCount === 1) s.appendChild(el("p", "hint", "no text yet (it comes with the request's finish)"));
}

function summary(body, life) {
  const r = life.request, l = life.latency;
  const p = el("p", "life-summary");
  p.textContent = "prompt " + r.num_prompt_tokens + " tokens · max_tokens " + r.max_tokens +
    " · priority " + r.priority + " · arrived at step " + r.arrival_step +
    (r.finish_step !== null ? " · finished at step " + r.finish_step + " (" + r.finish_reason + ")" : "") +
    (life.upto_step !== null ? " · life up to step " + life.upto_step : "");
  body.appendChild(p);
  const dl = el("dl", "life-latency");
  for (const [k, v] of [["TTFT", ms(l.ttft)], ["queue", ms(l.queue)], ["ITL mean", ms(l.itl_mean)],
    ["ITL max", ms(l.itl_max)], ["E2E", ms(l.e2e)]]) {
    dl.appendChild(el("dt", "", k));
    dl.appendChild(el("dd", "", v)).dataset.metric = k;
  }
  body.appendChild(dl);
}

export function renderLife(sel, loading) {
  const body = document.getElementById("rq-body");
  document.getElementById("rq-id").textContent = sel.req;
  const status = document.getElementById("rq-status");
  const link = document.getElementById("rq-link");
  const q = new URLSearchParams();
  if (mode.replay) q.set("session", mode.replay);
  q.set("req", sel.req);
  if (sel.step !== null) q.set("step", String(sel.step));
  link.href = "/?" + q;
  body.dataset.loading = loading ? "yes" : "no";
  if (loading && sel.life) return; // keep the old picture until the new one is in
  body.replaceChildren();
  if (sel.error) { body.appendChild(el("p", "flash flash-error", sel.error)); return; }
  const life = sel.life;
  if (!life) { body.appendChild(el("p", "hint", "reading its frames from the recording…")); return; }
  status.textContent = life.status.toLowerCase();
  status.className = "status status-" + life.status.toLowerCase();
  summary(body, life);
  scheduledSection(body, life);
  waitsSection(body, life);
  preemptSection(body, life);
  outputsSection(body, life);
  blocksSection(body, life);
  textSection(body, life);
  body.appendChild(el("p", "hint", "read from the recording: " + life.frames.scanned + " steps, " +
    life.frames.parsed + " parsed, " + life.elapsed_ms + " ms" + (life.cached ? " (cached)" : "")));
  body.dataset.req = life.req;
  body.dataset.upto = String(life.upto_step);
}
