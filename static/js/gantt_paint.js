/* gantt_paint.js: paints the timeline on a 2D canvas, only what is in view (windowing):
 * the rows between the top and the bottom of the plot, and of each row only the segments
 * that overlap the visible x range. Rectangles are gathered per colour and filled as one
 * path each, so thousands of bars cost a handful of fill calls. Details appear as the view
 * zooms in (level of detail): finish ticks, prefix-cache hits, draft marks (accepted vs
 * rejected), async marks (a step skipped because in-flight tokens reach max_tokens; a
 * token that arrived after a preemption), row labels. */
import { SEGMENT, STATUS } from "./protocol.js";
import { niceTicks, tickLabel } from "./gantt_axis.js";
const SEG = SEGMENT;
const KINDS = [SEG.WAITING, SEG.PREEMPTED, SEG.PREFILL, SEG.DECODE]; // in paint order
const KIND = {}; // segment kind -> its index in KINDS
KINDS.forEach((kind, k) => { KIND[kind] = k; });

/** Paint `v` (see GanttView.view()) on `ctx`. Returns the number of rows drawn. */
export function paintGantt(ctx, v) {
  const c = v.colors;
  const p = v.plot;
  ctx.clearRect(0, 0, v.width, v.height);
  ctx.fillStyle = c.bg;
  ctx.fillRect(p.l, p.t, p.w, p.h);
  const span = v.x1 - v.x0 || 1;
  const k = p.w / span;
  const X = (x) => p.l + (x - v.x0) * k;
  const xs = v.xmode === "time" ? (s) => v.axis.at(s) : (s) => s;
  const pxPerStep = v.xmode === "time" ? k * avgStep(v) : k;
  const first = Math.max(0, Math.floor(v.scrollY));
  const last = Math.min(v.ids.length, Math.ceil(v.scrollY + p.h / v.rowH));
  const rects = {};
  for (const kind of KINDS) rects[kind] = [];
  const hits = [], ticks = [], acc = [], rej = [], skips = [], lates = [];
  const pad = v.rowH >= 3 ? Math.min(2, v.rowH * 0.12) : 0;
  const barH = Math.max(v.rowH - 2 * pad, 0.6);
  const detail = v.rowH >= 4;
  const cur = Math.max(v.cur, 0);
  ctx.save();
  ctx.beginPath();
  ctx.rect(p.l, p.t, p.w, p.h);
  ctx.clip();
  if (v.sel !== null) {
    const i = v.ids.indexOf(v.sel);
    if (i >= first && i < last) {
      ctx.fillStyle = c.selBand;
      ctx.fillRect(p.l, p.t + (i - v.scrollY) * v.rowH - 1, p.w, v.rowH + 2);
    }
  }
  if (v.rowH < 1) {
    dense(ctx, v, X, xs, first, last, c);
  } else for (let i = first; i < last; i++) {
    const r = v.model.reqs.get(v.ids[i]);
    if (!r) continue;
    const y = p.t + (i - v.scrollY) * v.rowH + pad;
    for (const s of r.segs) {
      const end = s[2] === null ? Math.max(cur, s[1]) : s[2];
      const a = xs(s[1]), b = xs(end + 1);
      if (b < v.x0 || a > v.x1) continue;
      const xa = X(a);
      (rects[s[0]] || rects[SEG.WAITING]).push(xa, y, Math.max(X(b) - xa, 0.8), barH);
      if (detail && s[4] > 0) hits.push(xa, y + barH * 0.35, Math.max(X(b) - xa, 0.8), barH * 0.3);
    }
    if (!detail) continue;
    if (r.status === STATUS.FINISHED && r.finish_step !== null && v.rowH >= 3) {
      const x = xs(r.finish_step + 1);
      if (x >= v.x0 && x <= v.x1) ticks.push(X(x), y, barH);
    }
    if (r.marks && r.marks.length && pxPerStep >= 2) marks(r, v, X, xs, y, barH, acc, rej, skips, lates);
  }
  for (const kind of KINDS) fillRects(ctx, c[kind], rects[kind]);
  fillRects(ctx, c.hit, hits);
  fillRects(ctx, c.accepted, acc);
  fillRects(ctx, c.rejected, rej);
  strokeTicks(ctx, c.finished, ticks);
  fillRects(ctx, c.marker, skips, true);
  dots(ctx, c.late, lates);
  markers(ctx, v, X, xs, p, c);
  if (v.stepLine !== null && v.stepLine !== undefined) {
    const x = X(xs(v.stepLine + 1));
    ctx.strokeStyle = c.cursor;
    ctx.lineWidth = 1.5;
    ctx.beginPath(); ctx.moveTo(x, p.t); ctx.lineTo(x, p.t + p.h); ctx.stroke();
  }
  if (v.sel !== null) {
    const i = v.ids.indexOf(v.sel);
    if (i >= first && i < last) {
      ctx.strokeStyle = c.sel;
      ctx.lineWidth = 1.5;
      ctx.strokeRect(p.l + 0.75, p.t + (i - v.scrollY) * v.rowH - 1, p.w - 1.5, v.rowH + 2);
    }
  }
  ctx.restore();
  labels(ctx, v, first, last, p, c);
  xAxis(ctx, v, p, c);
  return last - first;
}

// Rows thinner than a pixel: many share each pixel row, so per pixel row and kind the
// spans are merged (sorted by one packed numeric key) and each union is one 1-px rect:
// a few thousand fills instead of one per segment (50,000 at 10,000 requests).
function dense(ctx, v, X, xs, first, last, c) {
  const p = v.plot, cur = Math.max(v.cur, 0);
  const xa = [], xb = [], keys = [];
  const W = 32768, ROWS = 8192, IDX = 4194304; // 2+13+15+22 bits < 2^53
  for (let i = first; i < last; i++) {
    const r = v.model.reqs.get(v.ids[i]);
    if (!r) continue;
    const row = Math.min(ROWS - 1, Math.floor((i - v.scrollY) * v.rowH));
    for (const s of r.segs) {
      const end = s[2] === null ? Math.max(cur, s[1]) : s[2];
      const a = xs(s[1]), b = xs(end + 1);
      if (b < v.x0 || a > v.x1) continue;
      const pa = Math.max(0, Math.floor(X(a) - p.l)), pb = Math.min(W - 1, Math.max(pa + 1, Math.ceil(X(b) - p.l)));
      const k = KIND[s[0]] === undefined ? 0 : KIND[s[0]];
      keys.push(((k * ROWS + row) * W + pa) * IDX + xa.length);
      xa.push(pa); xb.push(pb);
    }
  }
  const sorted = Float64Array.from(keys).sort();
  let kind = -1, row = -1, a = 0, b = -1;
  const flush = () => { if (b > a) ctx.fillRect(p.l + a, p.t + row, b - a, 1); };
  for (let j = 0; j < sorted.length; j++) {
    const key = sorted[j];
    const idx = key % IDX, rest = Math.floor(key / IDX);
    const k = Math.floor(rest / W / ROWS), r = Math.floor(rest / W) % ROWS;
    const sa = xa[idx], sb = xb[idx];
    if (k !== kind) { flush(); kind = k; row = -1; ctx.fillStyle = c[KINDS[k]]; }
    if (r !== row) { flush(); row = r; a = sa; b = sb; continue; }
    if (sa <= b) { if (sb > b) b = sb; } else { flush(); a = sa; b = sb; }
  }
  flush();
}

function avgStep(v) {
  const a = v.axis, n = a.steps.length;
  if (n < 2) return 1;
  return Math.max((a.times[n - 1] - a.times[0]) / (a.steps[n - 1] - a.steps[0]), 1e-9);
}

// Drafts: the accepted part of the step's drafts over the rejected part; skip / late marks.
function marks(r, v, X, xs, y, h, acc, rej, skips, lates) {
  for (const m of r.marks) {
    const a = xs(m[0]), b = xs(m[0] + 1);
    if (b < v.x0 || a > v.x1) continue;
    const xa = X(a), w = Math.max(X(b) - xa, 1);
    if (m[1] === "draft") {
      const fa = m[2] ? m[3] / m[2] : 0;
      if (m[3]) acc.push(xa, y, w, h * 0.45 * fa + 0.5);
      if (m[2] > m[3]) rej.push(xa, y + h * 0.55, w, h * 0.45 * (1 - fa) + 0.5);
    } else if (m[1] === "skip") {
      skips.push(xa + 0.5, y + 0.5, Math.max(w - 1, 2), Math.max(h - 1, 2));
    } else if (m[1] === "late") {
      lates.push(xa + w / 2, y + h / 2, Math.max(1.5, Math.min(h, w) / 3));
    }
  }
}

/** Rectangles [x, y, w, h, ...] as one path, filled (or outlined). */
function fillRects(ctx, colour, r, outline) {
  if (!r.length) return;
  ctx.beginPath();
  for (let i = 0; i < r.length; i += 4) ctx.rect(r[i], r[i + 1], r[i + 2], r[i + 3]);
  if (outline) { ctx.strokeStyle = colour; ctx.lineWidth = 1; ctx.stroke(); }
  else { ctx.fillStyle = colour; ctx.fill(); }
}
function strokeTicks(ctx, colour, t) {
  if (!t.length) return;
  ctx.strokeStyle = colour;
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  for (let i = 0; i < t.length; i += 3) { ctx.moveTo(t[i], t[i + 1]); ctx.lineTo(t[i], t[i + 1] + t[i + 2]); }
  ctx.stroke();
}
function dots(ctx, colour, d) {
  if (!d.length) return;
  ctx.fillStyle = colour;
  ctx.beginPath();
  for (let i = 0; i < d.length; i += 3) {
    ctx.moveTo(d[i] + d[i + 2], d[i + 1]);
    ctx.arc(d[i], d[i + 1], d[i + 2], 0, 2 * Math.PI);
  }
  ctx.fill();
}

function markers(ctx, v, X, xs, p, c) {
  if (!v.markers.length) return;
  ctx.strokeStyle = c.marker;
  ctx.fillStyle = c.marker;
  ctx.lineWidth = 1.5;
  ctx.setLineDash([3, 3]);
  ctx.font = "10px " + c.fontUi;
  ctx.textBaseline = "top";
  for (const m of v.markers) {
    const x = X(xs(m.step));
    if (x < p.l || x > p.l + p.w) continue;
    ctx.beginPath(); ctx.moveTo(x, p.t); ctx.lineTo(x, p.t + p.h); ctx.stroke();
    ctx.fillText(m.label, x + 3, p.t + 2);
  }
  ctx.setLineDash([]);
}

function labels(ctx, v, first, last, p, c) {
  ctx.fillStyle = c.fg;
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  if (v.rowH >= 9) {
    ctx.font = Math.min(11, v.rowH - 1) + "px " + c.fontMono;
    for (let i = first; i < last; i++) {
      const y = p.t + (i - v.scrollY + 0.5) * v.rowH;
      ctx.fillStyle = v.ids[i] === v.sel ? c.sel : c.fg;
      ctx.fillText(clip(ctx, v.ids[i], p.l - 8), p.l - 4, y);
    }
  } else if (v.ids.length) {
    ctx.font = "10px " + c.fontUi;
    ctx.fillStyle = c.muted;
    ctx.fillText((first + 1) + "–" + last, p.l - 4, p.t + 8);
    ctx.fillText("of " + v.ids.length, p.l - 4, p.t + 20);
  }
  ctx.textAlign = "left";
}
function clip(ctx, text, width) {
  if (ctx.measureText(text).width <= width) return text;
  let s = text;
  while (s.length > 2 && ctx.measureText("…" + s).width > width) s = s.slice(1);
  return "…" + s;
}

function xAxis(ctx, v, p, c) {
  const y = p.t + p.h;
  ctx.strokeStyle = c.grid;
  ctx.fillStyle = c.muted;
  ctx.font = "10px " + c.fontUi;
  ctx.textBaseline = "top";
  ctx.textAlign = "center";
  const ticks = niceTicks(v.x0, v.x1, Math.max(2, Math.floor(p.w / 90)));
  ctx.beginPath();
  for (const t of ticks) {
    const x = p.l + (t - v.x0) / (v.x1 - v.x0 || 1) * p.w;
    ctx.moveTo(x, y); ctx.lineTo(x, y + 4);
    ctx.fillText(tickLabel(t, v.xmode), x, y + 5);
  }
  ctx.stroke();
  ctx.textAlign = "left";
}
