/* charts.js: per-step series in one plotly figure with four stacked panels sharing the
 * step axis: prefill + decode tokens against max_num_batched_tokens; scheduled sequences
 * against max_num_seqs; queue depths; KV blocks used / cached / free. A rolling window of
 * the last WINDOW steps, extended with Plotly.extendTraces (full redraw only on reset). */
(function () {
  "use strict";
  const BS = (window.BS = window.BS || {});
  const WINDOW = 500;
  // [series key, name, y axis, colour var, options]
  const TRACES = [
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
  const st = { el: null, cursor: 0, epoch: -1 };
  BS.charts = st;

  function value(p, key) {
    if (key === "kv_free") return Math.max(0, (p.kv_total || 0) - p.kv_used - p.kv_cached);
    return p[key];
  }

  function traces(points) {
    const xs = points.map((p) => p.step);
    return TRACES.map(function (t) {
      const colour = BS.cssVar(t[3]);
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
      gridcolor: BS.cssVar("--grid"), zeroline: false, tickfont: { size: 9 } };
  }

  function layout() {
    return {
      margin: { l: 52, r: 10, t: 8, b: 30 }, showlegend: true, hovermode: "x unified",
      legend: { orientation: "h", x: 0, y: -0.07, yanchor: "top", font: { size: 10 },
        traceorder: "normal", itemwidth: 30 },
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: BS.cssVar("--plot-bg"),
      font: { family: BS.cssVar("--font-ui"), size: 11, color: BS.cssVar("--fg") },
      xaxis: { title: { text: "step", standoff: 2 }, gridcolor: BS.cssVar("--grid"),
        zeroline: false, anchor: "y4" },
      yaxis: axis([0.78, 1.0], "tokens"),
      yaxis2: axis([0.53, 0.74], "seqs"),
      yaxis3: axis([0.28, 0.49], "queues"),
      yaxis4: axis([0.03, 0.24], "KV blocks"),
      uirevision: "charts",
    };
  }

  function init() {
    st.el = document.getElementById("charts");
    if (!st.el) return;
    st.throttle = new BS.Throttle("charts.draw", st.el, 120, 0.15);
    Plotly.newPlot(st.el, traces([]), layout(),
      { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"] });
  }

  function full(model) {
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
    if (st.epoch !== model.epoch || model.history.end - st.cursor > WINDOW) full(model);
    else extend(model);
  }

  function render(model) {
    if (!st.el || !st.throttle) return;
    if (st.epoch === model.epoch && st.cursor === model.history.end) return;
    st.throttle.poke(function () { draw(BS.model); });
  }

  BS.register({ name: "charts", init: init, render: render });
})();
