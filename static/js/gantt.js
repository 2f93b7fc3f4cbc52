/* gantt.js: the request timeline, a canvas view (GanttView) with windowing, pan and zoom.
 * One row per request in the order its owner gives (timeline.js: the shared query of
 * filters.js), bars per segment
 * (waiting, prefill chunk, decode run, preempted), painted by gantt_paint.js.
 * Mouse: drag pans (x, and rows when they overflow), ctrl/⌘+wheel zooms x at the pointer,
 * shift+wheel pans x, wheel scrolls rows when they overflow, double-click fits, click selects.
 * Keys (timeline focused): ←/→ pan, +/− zoom, ↑/↓/PgUp/PgDn/Home/End rows, 0 fit, f follow.
 * The x axis is steps or seconds (#gantt-x); rows fit the height or have a fixed size. */
import { SEGMENT } from "./protocol.js";
import { cssVar } from "./common.js";
import { TimeAxis } from "./gantt_axis.js";
import { paintGantt } from "./gantt_paint.js";
import { waitingText } from "./waiting.js";
const GUTTER = 92; // px for row labels
const AXIS = 22; // px for the x axis
const ROW_MAX = 18;
const SEG = SEGMENT; // segment kinds (static/js/protocol.js)

function colours() {
  const v = (n) => cssVar(n);
  return { bg: v("--plot-bg"), fg: v("--fg"), muted: v("--muted"), grid: v("--grid"),
    [SEG.WAITING]: v("--c-waiting"), [SEG.PREFILL]: v("--c-prefill"),
    [SEG.DECODE]: v("--c-decode"), [SEG.PREEMPTED]: v("--c-preempted"),
    hit: v("--c-prefix-hit"), finished: v("--c-finished"),
    marker: v("--c-marker"), accepted: v("--c-accepted"), rejected: v("--c-rejected"),
    late: v("--c-late"), sel: v("--c-selected"), selBand: v("--c-selected-band"),
    cursor: v("--c-cursor"), fontUi: v("--font-ui"), fontMono: v("--font-mono") };
}

export class GanttView {
  /** opts: model() and ids() (rows in order), selected() -> req | null, stepLine() ->
   * step | null, onSelect(req, step). */
  constructor(el, opts) {
    this.el = el;
    this.opts = opts;
    this.canvas = document.createElement("canvas");
    this.tip = document.createElement("div");
    this.tip.className = "gantt-tip";
    this.tip.hidden = true;
    el.replaceChildren(this.canvas, this.tip);
    el.tabIndex = 0;
    this.ctx = this.canvas.getContext("2d");
    this.colors = colours();
    this.axis = new TimeAxis();
    this.xmode = "step";
    this.rowMode = "fit";
    this.x0 = 0; this.x1 = 1; this.autoX = true; this.follow = false;
    this.scrollY = 0;
    this.width = 0; this.height = 0;
    this.pending = false;
    this.drawn = 0;
    this.resize();
    // Redraw when the size changes (not on the observer's first call: nothing moved).
    new ResizeObserver(() => { if (this.resize()) this.redraw(); }).observe(el);
    this.wire();
  }

  resize() {
    const w = Math.max(200, this.el.clientWidth), h = Math.max(120, this.el.clientHeight);
    if (w === this.width && h === this.height) return false;
    this.width = w; this.height = h;
    const dpr = window.devicePixelRatio || 1;
    this.canvas.width = Math.round(w * dpr);
    this.canvas.height = Math.round(h * dpr);
    this.canvas.style.width = w + "px";
    this.canvas.style.height = h + "px";
    this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return true;
  }

  plot() { return { l: GUTTER, t: 4, w: this.width - GUTTER - 8, h: this.height - 4 - AXIS }; }
  rowHeight(n) {
    if (this.rowMode === "fit") return Math.min(ROW_MAX, this.plot().h / Math.max(n, 1));
    return parseFloat(this.rowMode);
  }
  xOf(step) { return this.xmode === "time" ? this.axis.at(step) : step; }
  stepOf(x) { return this.xmode === "time" ? this.axis.stepAt(x) : Math.floor(x); }

  /** The x range that shows every row from its arrival to the current step. */
  fitRange(model, ids) {
    let lo = Infinity;
    for (const id of ids) {
      const r = model.reqs.get(id);
      if (r && r.arrived_step < lo) lo = r.arrived_step;
    }
    if (lo === Infinity) lo = 0;
    const hi = Math.max(model.step + 1, lo + 1);
    const a = this.xOf(lo), b = this.xOf(hi);
    const margin = (b - a) * 0.01;
    return [a - margin, b + margin];
  }

  view(model, ids) {
    if (this.xmode === "time") this.axis.refresh(model);
    if (this.autoX) [this.x0, this.x1] = this.fitRange(model, ids);
    else if (this.follow) {
      const span = this.x1 - this.x0;
      this.x1 = this.xOf(model.step + 1) + span * 0.02;
      this.x0 = this.x1 - span;
    }
    const rowH = this.rowHeight(ids.length);
    const rows = this.plot().h / rowH;
    this.scrollY = Math.max(0, Math.min(this.scrollY, ids.length - rows));
    const stepLine = this.opts.stepLine ? this.opts.stepLine() : null;
    return { model: model, ids: ids, colors: this.colors, xmode: this.xmode, axis: this.axis,
      x0: this.x0, x1: this.x1, plot: this.plot(), width: this.width, height: this.height,
      rowH: rowH, scrollY: this.scrollY, cur: model.step,
      sel: this.opts.selected ? this.opts.selected() : null, stepLine: stepLine,
      markers: model.markers };
  }

  draw() {
    const t0 = performance.now();
    const model = this.opts.model();
    const ids = this.opts.ids();
    this.last = this.view(model, ids);
    this.drawn = paintGantt(this.ctx, this.last);
    this.el.dataset.rows = String(ids.length);
    this.el.dataset.drawn = String(this.drawn);
    this.el.dataset.renderMs = (performance.now() - t0).toFixed(1);
    // When the frame with this picture begins (for the bench's "first paint").
    const rows = String(ids.length);
    const log = (this.draws = this.draws || []); // [start ms, rows, draw ms] (the bench reads it)
    if (log.length < 20) log.push([Math.round(t0), ids.length, Math.round(performance.now() - t0)]);
    requestAnimationFrame(() => {
      this.el.dataset.shownAt = performance.now().toFixed(1);
      this.el.dataset.shownRows = rows;
    });
  }

  /** Redraw on the next animation frame (user interaction: no throttle). */
  redraw() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.draw(); });
  }

  // ---------------------------------------------------------------- navigation
  zoom(factor, px) {
    const p = this.plot();
    const at = px === undefined ? 0.5 : Math.min(1, Math.max(0, (px - p.l) / p.w));
    const span = (this.x1 - this.x0) * factor;
    const x = this.x0 + (this.x1 - this.x0) * at;
    this.autoX = false;
    this.x0 = x - span * at; this.x1 = this.x0 + span;
    this.redraw();
  }
  pan(fraction) {
    const d = (this.x1 - this.x0) * fraction;
    this.autoX = false;
    this.x0 += d; this.x1 += d;
    this.redraw();
  }
  scrollRows(d) { this.scrollY += d; this.redraw(); }
  fit() { this.autoX = true; this.follow = false; this.scrollY = 0; this.redraw(); }
  toggleFollow() {
    if (this.autoX) [this.x0, this.x1] = [this.last.x0, this.last.x1];
    this.autoX = false; this.follow = !this.follow; this.redraw();
  }
  /** Scroll so request `req` is in view. */
  reveal(req) {
    const ids = this.opts.ids();
    const i = ids.indexOf(req);
    if (i < 0) return;
    const rows = this.plot().h / this.rowHeight(ids.length);
    if (i < this.scrollY || i >= this.scrollY + rows - 1) this.scrollY = i - rows / 2;
    this.redraw();
  }

  /** Where request `req` is drawn at `step` ({x, y} in the view's pixels), or null. */
  pointOf(req, step) {
    const v = this.last;
    const i = v ? v.ids.indexOf(req) : -1;
    if (i < 0) return null;
    const p = v.plot;
    const x = p.l + (this.xOf(step + 0.5) - v.x0) / (v.x1 - v.x0) * p.w;
    return { x: x, y: p.t + (i - v.scrollY + 0.5) * v.rowH };
  }

  /** {req, step, seg} under the pointer, or null. */
  hit(px, py) {
    const v = this.last;
    if (!v) return null;
    const p = v.plot;
    if (px < p.l || px > p.l + p.w || py < p.t || py > p.t + p.h) return null;
    const i = Math.floor(v.scrollY + (py - p.t) / v.rowH);
    const req = v.ids[i];
    if (req === undefined) return null;
    const step = this.stepOf(v.x0 + (px - p.l) / p.w * (v.x1 - v.x0));
    const r = v.model.reqs.get(req);
    let seg = null;
    if (r) {
      for (const s of r.segs) {
        const end = s[2] === null ? Math.max(v.cur, s[1]) : s[2];
        if (step >= s[1] && step <= end) seg = s;
      }
    }
    return { req: req, step: step, seg: seg, row: r };
  }

  showTip(ev, h) {
    if (!h || !h.row) { this.tip.hidden = true; return; }
    const r = h.row;
    const lines = [r.req + " · " + r.status.toLowerCase() + " · step " + h.step];
    if (h.seg) {
      const s = h.seg, end = s[2] === null ? Math.max(this.last.cur, s[1]) : s[2];
      const steps = s[1] === end ? "step " + s[1] : "steps " + s[1] + "–" + end;
      const what = { [SEG.WAITING]: "waiting",
        [SEG.PREFILL]: "prefill chunk " + s[3] + " tokens",
        [SEG.DECODE]: "decode " + s[3] + " tokens",
        [SEG.PREEMPTED]: "preempted: " + s[3] + " tokens lost (recomputed)" }[s[0]] || s[0];
      lines.push(what + " · " + steps + (s[4] ? " · prefix hit " + s[4] : ""));
      if (s[2] === null && r.waiting_reason) {
        lines.push(waitingText(r.req, r.waiting_reason, this.last.model.waitingDetail));
      }
    }
    lines.push("prompt " + r.num_prompt_tokens + " · max_tokens " + r.max_tokens +
      (r.num_preemptions ? " · preempted ×" + r.num_preemptions : ""));
    lines.push("click: its whole life");
    this.tip.textContent = lines.join("\n");
    this.tip.hidden = false;
    const x = Math.min(ev.offsetX + 14, this.width - 320);
    this.tip.style.transform = "translate(" + x + "px," + (ev.offsetY + 14) + "px)";
  }

  wire() {
    const el = this.el;
    let drag = null;
    el.addEventListener("wheel", (ev) => {
      const v = this.last;
      const overflow = v && v.ids.length * v.rowH > v.plot.h + 1;
      if (ev.ctrlKey || ev.metaKey) this.zoom(Math.exp(ev.deltaY * 0.002), ev.offsetX);
      else if (ev.shiftKey) this.pan((ev.deltaY || ev.deltaX) / Math.max(this.plot().w, 1));
      else if (overflow) this.scrollRows(ev.deltaY / v.rowH / 2);
      else return;
      ev.preventDefault();
    }, { passive: false });
    el.addEventListener("mousedown", (ev) => {
      drag = { x: ev.clientX, y: ev.clientY, x0: this.x0, x1: this.x1, sy: this.scrollY,
        moved: false };
    });
    window.addEventListener("mousemove", (ev) => {
      if (!drag) return;
      const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
      drag.moved = true;
      const per = (drag.x1 - drag.x0) / Math.max(this.plot().w, 1);
      this.autoX = false;
      this.x0 = drag.x0 - dx * per; this.x1 = drag.x1 - dx * per;
      if (this.last) this.scrollY = drag.sy - dy / this.last.rowH;
      this.redraw();
    });
    window.addEventListener("mouseup", (ev) => {
      if (!drag) return;
      const moved = drag.moved;
      drag = null;
      if (moved || ev.target !== this.canvas) return;
      const h = this.hit(ev.offsetX, ev.offsetY);
      if (h && this.opts.onSelect) this.opts.onSelect(h.req, h.step);
    });
    el.addEventListener("mousemove", (ev) => {
      if (!drag && ev.target === this.canvas) this.showTip(ev, this.hit(ev.offsetX, ev.offsetY));
    });
    el.addEventListener("mouseleave", () => { this.tip.hidden = true; });
    el.addEventListener("dblclick", () => this.fit());
    el.addEventListener("keydown", (ev) => this.onKey(ev));
  }

  onKey(ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const page = this.last ? this.last.plot.h / this.last.rowH : 10;
    const k = ev.key;
    if (k === "ArrowLeft" || k === "ArrowRight") this.pan((k === "ArrowLeft" ? -1 : 1) * (ev.shiftKey ? 0.5 : 0.1));
    else if (k === "+" || k === "=") this.zoom(1 / 1.5);
    else if (k === "-" || k === "_") this.zoom(1.5);
    else if (k === "ArrowUp" || k === "ArrowDown") this.scrollRows((k === "ArrowUp" ? -1 : 1) * (ev.shiftKey ? page : 1));
    else if (k === "PageUp" || k === "PageDown") this.scrollRows((k === "PageUp" ? -1 : 1) * page);
    else if (k === "Home") this.scrollRows(-Infinity);
    else if (k === "End") this.scrollRows(Infinity);
    else if (k === "0") this.fit();
    else if (k === "f") this.toggleFollow();
    else return;
    if (!isFinite(this.scrollY)) this.scrollY = this.scrollY > 0 ? 1e9 : 0;
    ev.preventDefault();
    ev.stopPropagation();
  }
}
