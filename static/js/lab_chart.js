/* lab_chart.js: the figure of a sweep (labFigure) from its JSON (/api/lab/sweeps/ID):
 * one knob -> the metric against the knob's values (latency: the p50..p99 band with p95
 * dashed, the chosen percentile bold; one marker per run, clickable; error bars = the
 * spread of the repeats), an optional second metric on the right axis; two knobs -> a
 * heatmap of the metric (mean over repeats), or one line per value of the second knob.
 * Every clickable mark carries the run's point index as customdata. */
import { cssVar, esc } from "./common.js";

const key = (v) => JSON.stringify(v);
const label = (v) => (typeof v === "string" ? v : JSON.stringify(v));
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;

function metricInfo(sweep, name) {
  return sweep.metrics.find((m) => m.key === name) || { key: name, label: name, unit: "",
    percentiles: false };
}
function metricKey(info, pct) {
  return info.percentiles ? info.key + "_" + pct + "_ms" : info.key;
}
function axisTitle(info, pct) {
  const unit = info.unit ? " (" + info.unit + ")" : "";
  return (info.percentiles ? info.label.split(" (")[0] + " " + pct : info.label) + unit;
}

/** Runs grouped by their knob values (in the sweep's value order). */
function groups(sweep) {
  const ok = sweep.points.filter((p) => !p.error);
  const names = sweep.knob_names;
  const out = new Map();
  for (const p of ok) {
    const k = names.map((n) => key(p.knobs[n])).join("|");
    if (!out.has(k)) out.set(k, []);
    out.get(k).push(p);
  }
  return out;
}

function xValues(sweep, i) {
  const values = sweep.knobs[i].values;
  const numeric = values.every((v) => typeof v === "number");
  return { values: values, numeric: numeric, xs: values.map((v) => (numeric ? v : label(v))) };
}

function stats(runs, mkey) {
  const ys = runs.map((p) => p.metrics[mkey]);
  const m = mean(ys);
  return { mean: m, plus: Math.max(...ys) - m, minus: m - Math.min(...ys) };
}

/** A line of means over the first knob's values (null where no run finished yet). */
function series(sweep, g, x, mkey, fixed) {
  const rows = x.values.map(function (v) {
    const k = [key(v)].concat(fixed === undefined ? [] : [fixed]).join("|");
    const runs = g.get(k);
    return runs ? stats(runs, mkey) : null;
  });
  return {
    y: rows.map((r) => (r ? r.mean : null)),
    plus: rows.map((r) => (r ? r.plus : 0)),
    minus: rows.map((r) => (r ? r.minus : 0)),
  };
}

function runMarkers(sweep, g, x, mkey, name, colour, yaxis, fixed) {
  const xs = [], ys = [], ids = [], text = [];
  x.values.forEach(function (v, i) {
    const k = [key(v)].concat(fixed === undefined ? [] : [fixed]).join("|");
    for (const p of g.get(k) || []) {
      xs.push(x.xs[i]); ys.push(p.metrics[mkey]); ids.push(p.index);
      text.push("run " + p.index + " (repeat " + p.repeat + ")");
    }
  });
  return { type: "scatter", mode: "markers", name: name, x: xs, y: ys, customdata: ids,
    text: text, yaxis: yaxis, showlegend: false,
    marker: { color: colour, size: 7, line: { color: "#fff", width: 1 } },
    hovertemplate: "%{text}<br>%{y:.3~f}<extra>" + esc(name) + "</extra>" };
}

function line(name, x, s, colour, opts) {
  const tr = { type: "scatter", mode: "lines", name: name, x: x.xs, y: s.y,
    yaxis: opts.yaxis || "y", connectgaps: true,
    line: { color: colour, width: opts.width || 2, dash: opts.dash || "solid" },
    hovertemplate: "%{y:.3~f}<extra>" + esc(name) + "</extra>" };
  if (opts.fill) { tr.fill = "tonexty"; tr.fillcolor = opts.fill; }
  if (opts.errors) {
    tr.error_y = { type: "data", symmetric: false, array: s.plus, arrayminus: s.minus,
      color: colour, thickness: 1.2, width: 4 };
  }
  return tr;
}

function oneKnob(sweep, opts) {
  const g = groups(sweep);
  const x = xValues(sweep, 0);
  const info = metricInfo(sweep, opts.metric);
  const blue = cssVar("--c-prefill"), red = cssVar("--c-preempted");
  const errors = sweep.repeat > 1;
  const data = [];
  if (info.percentiles) {
    const p99 = series(sweep, g, x, metricKey(info, "p99"));
    const p50 = series(sweep, g, x, metricKey(info, "p50"));
    const p95 = series(sweep, g, x, metricKey(info, "p95"));
    const bold = (p) => (p === opts.pct ? 3 : 1.5);
    data.push(line(info.key + " p99", x, p99, blue, { width: bold("p99"), errors: errors }));
    data.push(line(info.key + " p50", x, p50, blue,
      { width: bold("p50"), fill: "rgba(47,100,200,0.12)", errors: errors }));
    data.push(line(info.key + " p95", x, p95, blue,
      { width: bold("p95"), dash: "dash", errors: errors }));
  } else {
    data.push(line(info.label, x, series(sweep, g, x, info.key), blue, { width: 3, errors: errors }));
  }
  data.push(runMarkers(sweep, g, x, metricKey(info, opts.pct), info.label, blue, "y"));
  const layout = baseLayout(sweep.knob_names[0], axisTitle(info, opts.pct), x.numeric);
  if (opts.metric2) {
    const info2 = metricInfo(sweep, opts.metric2);
    const k2 = metricKey(info2, opts.pct);
    data.push(line(axisTitle(info2, opts.pct), x, series(sweep, g, x, k2), red,
      { yaxis: "y2", dash: "dot", width: 2.5, errors: errors }));
    data.push(runMarkers(sweep, g, x, k2, info2.label, red, "y2"));
    layout.yaxis2 = { title: { text: axisTitle(info2, opts.pct) }, overlaying: "y",
      side: "right", rangemode: "tozero", zeroline: false, showgrid: false };
    layout.margin.r = 70;
  }
  return { data: data, layout: layout };
}

function twoKnobs(sweep, opts) {
  const g = groups(sweep);
  const x = xValues(sweep, 0), y = xValues(sweep, 1);
  const info = metricInfo(sweep, opts.metric);
  const mkey = metricKey(info, opts.pct);
  if (opts.view === "lines") {
    const palette = ["--c-prefill", "--c-preempted", "--c-decode", "--c-limit", "--c-marker",
      "--c-prefix-hit"].map(cssVar);
    const data = [];
    y.values.forEach(function (v, j) {
      const colour = palette[j % palette.length];
      const name = sweep.knob_names[1] + "=" + label(v);
      const s = series(sweep, g, x, mkey, key(v));
      data.push(line(name, x, s, colour, { errors: sweep.repeat > 1 }));
      data.push(runMarkers(sweep, g, x, mkey, name, colour, "y", key(v)));
    });
    return { data: data, layout: baseLayout(sweep.knob_names[0], axisTitle(info, opts.pct),
      x.numeric) };
  }
  const z = [], ids = [];
  y.values.forEach(function (vy) {
    const zr = [], ir = [];
    x.values.forEach(function (vx) {
      const runs = g.get(key(vx) + "|" + key(vy));
      zr.push(runs ? stats(runs, mkey).mean : null);
      ir.push(runs ? runs[0].index : null);
    });
    z.push(zr); ids.push(ir);
  });
  const data = [{ type: "heatmap", x: x.xs.map(String), y: y.xs.map(String), z: z,
    customdata: ids, colorscale: "Viridis", texttemplate: "%{z:.3~s}",
    colorbar: { title: { text: axisTitle(info, opts.pct), side: "right" } },
    hovertemplate: sweep.knob_names[0] + "=%{x}<br>" + sweep.knob_names[1] +
      "=%{y}<br>%{z:.4~f}<extra></extra>" }];
  const layout = baseLayout(sweep.knob_names[0], sweep.knob_names[1], false);
  layout.xaxis.type = "category"; layout.yaxis.type = "category";
  return { data: data, layout: layout };
}

function baseLayout(xtitle, ytitle, numeric) {
  return {
    margin: { l: 64, r: 16, t: 10, b: 48 }, hovermode: "closest",
    paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: cssVar("--plot-bg"),
    font: { family: cssVar("--font-ui"), size: 11, color: cssVar("--fg") },
    legend: { orientation: "h", x: 0, y: 1.08 },
    xaxis: { title: { text: xtitle }, type: numeric ? "linear" : "category",
      gridcolor: cssVar("--grid"), zeroline: false },
    yaxis: { title: { text: ytitle }, rangemode: "tozero", gridcolor: cssVar("--grid"),
      zeroline: false },
  };
}

/** opts: {metric, metric2, pct, view}. */
export function labFigure(sweep, opts) {
  const fig = sweep.knob_names.length === 2 ? twoKnobs(sweep, opts) : oneKnob(sweep, opts);
  fig.config = { displaylogo: false, responsive: true };
  return fig;
}
