/* lab_sweep.js: the sweep page. Reads the sweep's JSON twin, fills the metric pickers,
 * draws labFigure, and redraws each time htmx swaps in fresh progress (every second
 * while the sweep runs). A click on a run (chart marker, heatmap cell or the table's
 * "open") opens it as a recorded session; two ticked runs open in /compare. */
import { api, flash } from "./common.js";
import { labFigure } from "./lab_chart.js";
const $ = (id) => document.getElementById(id);
const st = { sweep: null, api: "" };

function fillSelect(el, metrics, chosen, allowNone) {
  if (!el || el.options.length) return;
  if (allowNone) el.add(new Option("—", ""));
  for (const m of metrics) el.add(new Option(m.label, m.key, false, m.key === chosen));
}

function options() {
  const view = $("chart-view");
  return { metric: $("chart-metric").value, metric2: $("chart-metric2").value,
    pct: $("chart-pct").value, view: view ? view.value : "heatmap" };
}

function draw() {
  const el = $("lab-chart");
  if (!st.sweep || !window.Plotly) return;
  const fig = labFigure(st.sweep, options());
  Plotly.react(el, fig.data, fig.layout, fig.config);
  el.dataset.runs = String(st.sweep.points.filter((p) => !p.error).length);
  document.body.dataset.drawn = st.sweep.progress.finished ? "final" : "partial";
}

async function load() {
  try {
    st.sweep = await api("GET", st.api);
  } catch (e) {
    flash(false, e.message);
    return;
  }
  const el = $("lab-chart");
  fillSelect($("chart-metric"), st.sweep.metrics, el.dataset.metric, false);
  fillSelect($("chart-metric2"), st.sweep.metrics, el.dataset.metric2, true);
  draw();
}

/** The run as a recorded session (made on first open); resolves to its id. */
async function session(index) {
  const out = await api("POST", st.api + "/points/" + encodeURIComponent(index) + "/session");
  return out.session;
}

async function open(index) {
  flash(true, "opening run " + index + " as a session…");
  try {
    location.assign("/?session=" + encodeURIComponent(await session(index)));
  } catch (e) {
    flash(false, e.message);
  }
}

function picked() {
  return Array.from(document.querySelectorAll("#lab-points-table input.pick:checked"),
    (el) => el.value);
}
function syncCompare() {
  const btn = $("btn-compare-points");
  if (!btn) return;
  const n = picked().length;
  btn.disabled = n !== 2;
  btn.title = n === 2 ? "compare the two ticked runs" : "tick two runs (" + n + " ticked)";
}

async function compare() {
  const runs = picked();
  if (runs.length !== 2) return;
  flash(true, "opening runs " + runs.join(" and ") + " as sessions…");
  try {
    const a = await session(runs[0]);
    const b = await session(runs[1]);
    location.assign("/compare?a=" + encodeURIComponent(a) + "&b=" + encodeURIComponent(b));
  } catch (e) {
    flash(false, e.message);
  }
}

document.addEventListener("DOMContentLoaded", function () {
  const page = $("lab-sweep");
  if (!page) return;
  st.api = page.dataset.api;
  for (const id of ["chart-metric", "chart-metric2", "chart-pct", "chart-view"]) {
    const el = $(id);
    if (el) el.addEventListener("change", draw);
  }
  page.addEventListener("click", function (ev) {
    const btn = ev.target.closest("button");
    if (!btn) return;
    if (btn.classList.contains("open-point")) open(btn.closest("tr").dataset.index);
    else if (btn.id === "btn-compare-points") compare();
    else if (btn.id === "btn-cancel") {
      api("POST", st.api + "/cancel").then(
        () => flash(true, "cancelling: the running points finish first"),
        (e) => flash(false, e.message));
    }
  });
  page.addEventListener("change", function (ev) {
    if (ev.target.classList.contains("pick")) syncCompare();
  });
  document.body.addEventListener("htmx:afterSwap", function (ev) {
    if (ev.detail.target && ev.detail.target.id === "lab-points") load();
    syncCompare();
  });
  load().then(function () {
    $("lab-chart").on("plotly_click", function (ev) {
      const pt = ev.points && ev.points[0];
      if (pt && pt.customdata !== undefined && pt.customdata !== null) open(pt.customdata);
    });
  });
  syncCompare();
});
