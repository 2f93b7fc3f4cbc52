/* charts.js: per-step series in one plotly figure with stacked panels sharing the step
 * axis: prefill + decode tokens (+ static batching's padding) against
 * max_num_batched_tokens; scheduled sequences against max_num_seqs; queue depths; KV
 * blocks used / cached / free; with speculative decoding a fifth panel: drafts scheduled
 * and accepted per step and the acceptance rate. A rolling window of the last WINDOW
 * steps, extended with Plotly.extendTraces (full redraw on reset or a mode change). */
import { cssVar } from "./common.js";
import { pageModel, schedule } from "./live.js";
import { Throttle } from "./throttle.js";
const WINDOW = 500;
// [series key, name, y axis, colour var, options]
const BASE = [
  ["prefill", "prefill", "y", "--c-prefill", { stackgroup: "tok" }],
  ["decode", "decode", "y", "--c-decode", { stackgroup: "tok" }],
  ["max_tokens", "max_num_batched_tokens", "y", "--c-limit", { dash: true }],
  ["seqs", "seqs", "y2", "--c-prefill", {}],
  ["max_seqs", "max_num_seqs", "y2", "--c-limit", { dash: true }],
  ["running", "running", "y3", "--c-decode", {}],
  ["waiting", "waiting", "y3", "--c-waiting-line", {}],
  ["kv_used", "used", "y4", "--kv-used", { stackgroup: "kv" }],
  ["kv_cached", "cached", "y4", "--kv-cached", { stackgroup: "kv" }],
  ["kv_free", "free", "y4", "--kv-free-line", { stackgroup: "kv" }],
];
const PADDING = ["padding", "padding (static)", "y", "--c-waiting-line", { stackgroup: "tok" }];
const SPEC = [
  ["spec", "drafts", "y5", "--c-rejected", {}],
  ["accepted", "accepted", "y5", "--c-accepted", {}],
  ["accept_rate", "acceptance %", "y6", "--c-limit", { dash: true }],
];
let TRACES = BASE;
const st = { el: null, cursor: 0, epoch: -1, mode: "", loading: false };
export { st as charts };

function value(p, key) {
  if (key === "kv_free") return Math.max(0, (p.kv_total || 0) - p.kv_used - p.kv_cached);
  if (key === "accept_rate") return p.spec ? Math.round(1000 * (p.accepted || 0) / p.spec) / 10 : null;
  return p[key] === undefined ? 0 : p[key];
}

/** The traces for the session's mode (spec: the drafts panel; static: padding). */
function modeOf(model) {
  const c = model.config || {};
  return (c.num_speculative_tokens > 0 ? "spec" : "") + (c.batching === "static" ? "+static" : "");
}
function tracesFor(mode) {
  let t = BASE.slice();
  if (mode.indexOf("static") >= 0) t.splice(2, 0, PADDING);
  if (mode.indexOf("spec") === 0) t = t.concat(SPEC);
  return t;
}

function traces(points) {
  const xs = points.map((p) => p.step);
  return TRACES.map(function (t) {
    const colour = cssVar(t[3]);
    const tr = { type: "scatter", mode: "lines", name: t[1], yaxis: t[2], x: xs.slice(),
      y: points.map((p) => value(p, t[0])), hovertemplate: "%{y}<extra>" + t[1] + "</extra>",
      line: { color: colour, width: t[4].dash ? 1.5 : 1.2, shape: "hv",
        dash: t[4].dash ? "dash" : "solid" } };
    if (t[4].stackgroup) { tr.stackgroup = t[4].stackgroup; tr.fillcolor = colour; }
    return tr;
  });
}

function axis(domain, title) {
  return { domain: domain, title: { text: title, font: { size: 10 } }, rangemode: "tozero",
    gridcolor: cssVar("--grid"), zeroline: false, tickfont: { size: 9 } };
}

function layout() {
  const spec = st.mode.indexOf("spec") === 0;
  const n = spec ? 5 : 4;
  const gap = 0.04, h = (0.97 - gap * (n - 1)) / n;
  const dom = (i) => [0.03 + (n - 1 - i) * (h + gap), 0.03 + (n - 1 - i) * (h + gap) + h];
  const out = {
    margin: { l: 52, r: spec ? 40 : 10, t: 8, b: 30 }, showlegend: true, hovermode: "x unified",
    legend: { orientation: "h", x: 0, y: -0.07, yanchor: "top", font: { size: 10 },
      traceorder: "normal", itemwidth: 30 },
    paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: cssVar("--plot-bg"),
    font: { family: cssVar("--font-ui"), size: 11, color: cssVar("--fg") },
    xaxis: { title: { text: "step", standoff: 2 }, gridcolor: cssVar("--grid"),
      zeroline: false, anchor: spec ? "y5" : "y4" },
    yaxis: axis(dom(0), "tokens"),
    yaxis2: axis(dom(1), "seqs"),
    yaxis3: axis(dom(2), "queues"),
    yaxis4: axis(dom(3), "KV blocks"),
    uirevision: "charts" + st.mode,
  };
  if (spec) {
    out.yaxis5 = axis(dom(4), "drafts");
    out.yaxis6 = { overlaying: "y5", side: "right", range: [0, 100], showgrid: false,
      title: { text: "%", font: { size: 10 } }, tickfont: { size: 9 }, zeroline: false };
  }
  return out;
}

// plotly (4.6 MB) is fetched and compiled after the timeline's first picture, never
// before it: the page's first paint does not wait for the charts.
function loadPlotly(el) {
  if (window.Plotly || st.loading) return;
  st.loading = true;
  const tag = document.createElement("script");
  tag.src = el.dataset.plotly;
  tag.addEventListener("load", function () { init(); schedule(); });
  document.head.appendChild(tag);
}

function init() {
  const el = document.getElementById("charts");
  if (!el) return;
  if (!window.Plotly) {
    // Compiling plotly blocks the main thread for 0.3-2 s: only once the timeline's first
    // picture is on screen (or, with no snapshot at all, after a while).
    const later = window.requestIdleCallback || ((fn) => setTimeout(fn, 50));
    document.body.addEventListener("bs:painted", () => later(() => loadPlotly(el), { timeout: 500 }));
    setTimeout(() => loadPlotly(el), 5000);
    return;
  }
  st.el = el;
  st.throttle = new Throttle("charts.draw", st.el, 120, 0.15);
  Plotly.newPlot(st.el, traces([]), layout(),
    { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"] });
}

function full(model) {
  st.mode = modeOf(model);
  TRACES = tracesFor(st.mode);
  const pts = model.history.since(model.history.end - WINDOW);
  Plotly.react(st.el, traces(pts), layout(),
    { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"] });
  st.cursor = model.history.end;
  st.epoch = model.epoch;
}

function extend(model) {
  const pts = model.history.since(st.cursor);
  st.cursor = model.history.end;
  if (!pts.length) return;
  const xs = pts.map((p) => p.step);
  const update = { x: [], y: [] };
  const idx = [];
  TRACES.forEach(function (t, i) {
    update.x.push(xs.slice());
    update.y.push(pts.map((p) => value(p, t[0])));
    idx.push(i);
  });
  Plotly.extendTraces(st.el, update, idx, WINDOW);
}

function draw(model) {
  const stale = st.epoch !== model.epoch || st.mode !== modeOf(model);
  if (stale || model.history.end - st.cursor > WINDOW) full(model);
  else extend(model);
}

function render(model) {
  if (!st.el || !st.throttle) return;
  if (st.epoch === model.epoch && st.cursor === model.history.end && st.mode === modeOf(model)) return;
  st.throttle.poke(function () { draw(pageModel); });
}

/** Drawn by live.js (registered by dashboard.js). */
export const renderer = { name: "charts", init: init, render: render };
