/* gantt.js: the request timeline. One row per request (newest at the top), one
 * horizontal-bar trace per segment kind (base/x arrays), a thin overlay for prefix-cache
 * hits, finish ticks, and a vertical marker per config change. Plotly.react runs at most
 * ~10 times a second and only over the visible rows (the latest N requests).
 * BS.ganttFigure(model, {xmode, rows}) builds a figure for any model (the compare page). */
(function () {
  "use strict";
  const BS = (window.BS = window.BS || {});
  // Level of detail: finish ticks are drawn up to this many rows (beyond it a row is a
  // pixel or two high and the tick is invisible, but it would still cost an SVG node).
  const FINISH_TICKS_MAX_ROWS = 600;
  const KINDS = ["waiting", "preempted", "prefill", "decode"];
  const LABEL = { waiting: "waiting", preempted: "preempted (recompute)",
    prefill: "prefill chunk", decode: "decode" };

  const st = { el: null, xmode: "step", rows: 300, drawn: -1,
    markersDrawn: -1, epoch: -1, shown: 0 };
  BS.gantt = st;

  const esc = BS.esc;

  function init() {
    st.el = document.getElementById("gantt");
    if (!st.el) return;
    st.throttle = new BS.Throttle("gantt.draw", st.el, 100, 0.2);
    const xsel = document.getElementById("gantt-x");
    const rsel = document.getElementById("gantt-rows");
    if (xsel) xsel.addEventListener("change", function () { st.xmode = xsel.value; force(); });
    if (rsel) rsel.addEventListener("change", function () {
      st.rows = parseInt(rsel.value, 10) || 0; force();
    });
    Plotly.newPlot(st.el, [], layout([], [], [], BS.model, st), config());
  }
  // A user action (x mode, row cap) redraws at once, outside the live-rate throttle.
  function force() {
    st.markersDrawn = -1;
    BS.timed("gantt.draw", function () { draw(BS.model); });
  }

  function config() {
    return { displaylogo: false, responsive: true, scrollZoom: false,
      modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"] };
  }

  function layout(tickvals, ticktext, markers, model, o) {
    const shapes = [];
    const annotations = [];
    for (const m of markers) {
      shapes.push({ type: "line", xref: "x", yref: "paper", x0: m.x, x1: m.x, y0: 0, y1: 1,
        line: { color: BS.cssVar("--c-marker"), width: 1.5, dash: "dot" } });
      annotations.push({ xref: "x", yref: "paper", x: m.x, y: 1, yanchor: "bottom",
        xanchor: "left", text: esc(m.label), showarrow: false,
        font: { size: 10, color: BS.cssVar("--c-marker") } });
    }
    return {
      barmode: "overlay", bargap: 0.2, showlegend: false, hovermode: "closest",
      margin: { l: 70, r: 12, t: 22, b: 40 },
      uirevision: String(model.epoch) + o.xmode + o.rows,
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: BS.cssVar("--plot-bg"),
      font: { family: BS.cssVar("--font-ui"), size: 11, color: BS.cssVar("--fg") },
      xaxis: { title: { text: o.xmode === "time" ? "seconds" : "step", standoff: 4 },
        zeroline: false, gridcolor: BS.cssVar("--grid") },
      yaxis: { tickvals: tickvals, ticktext: ticktext, zeroline: false, showgrid: false,
        range: tickvals.length ? undefined : [-0.5, 0.5], fixedrange: false,
        tickfont: { family: BS.cssVar("--font-mono"), size: 10 } },
      shapes: shapes, annotations: annotations,
    };
  }

  // x coordinates of a step range [s0, s1] (inclusive) in the current mode.
  function span(model, s0, s1, o) {
    if (o.xmode === "step") return [s0, s1 - s0 + 1];
    const a = model.timeOf(s0);
    let b = model.tEnd.get(s1);
    if (b === undefined) b = model.timeOf(s1 + 1);
    if (a === null || b === null || b === undefined) return null;
    return [a, Math.max(b - a, 1e-6)];
  }

  function build(model, o) {
    const traces = {};
    for (const k of KINDS) traces[k] = { y: [], base: [], x: [], text: [] };
    const hit = { y: [], base: [], x: [], text: [] };
    const fin = { y: [], x: [], text: [] };
    const order = model.order;
    const from = o.rows > 0 ? Math.max(0, order.length - o.rows) : 0;
    const tickvals = [];
    const ticktext = [];
    const n = order.length - from;
    const every = Math.max(1, Math.ceil(n / 40));
    const cur = Math.max(model.step, 0);
    for (let i = from; i < order.length; i++) {
      const r = model.reqs.get(order[i]);
      if (!r) continue;
      const y = i - from;
      const id = esc(r.req);
      if ((n - 1 - y) % every === 0) { tickvals.push(y); ticktext.push(id); }
      for (const s of r.segs) {
        const end = s[2] === null ? Math.max(cur, s[1]) : s[2];
        const xs = span(model, s[1], end, o);
        if (!xs) continue;
        const t = traces[s[0]] || traces.waiting;
        t.y.push(y); t.base.push(xs[0]); t.x.push(xs[1]);
        t.text.push(hoverText(r, s, end, id));
        if (s[4] > 0) {
          hit.y.push(y); hit.base.push(xs[0]); hit.x.push(xs[1]);
          hit.text.push("<b>" + id + "</b> prefix-cache hit<br>" + s[4] + " tokens at step " + s[1]);
        }
      }
      if (n <= FINISH_TICKS_MAX_ROWS && r.finish_step !== null && r.status === "FINISHED") {
        const xs = span(model, r.finish_step, r.finish_step, o);
        if (xs) {
          fin.y.push(y); fin.x.push(xs[0] + xs[1]);
          fin.text.push("<b>" + id + "</b> finished (" + esc(r.finish_reason) + ") at step " +
            r.finish_step);
        }
      }
    }
    const data = KINDS.map(function (k) {
      return { type: "bar", orientation: "h", name: LABEL[k], y: traces[k].y,
        base: traces[k].base, x: traces[k].x, text: traces[k].text, width: 0.8,
        textposition: "none", hovertemplate: "%{text}<extra></extra>",
        marker: { color: BS.cssVar("--c-" + k), line: { width: 0 } } };
    });
    data.push({ type: "bar", orientation: "h", name: "prefix hit", y: hit.y, base: hit.base,
      x: hit.x, text: hit.text, width: 0.3, textposition: "none",
      hovertemplate: "%{text}<extra></extra>", marker: { color: BS.cssVar("--c-prefix-hit") } });
    data.push({ type: "scatter", mode: "markers", name: "finish", y: fin.y, x: fin.x,
      text: fin.text, hovertemplate: "%{text}<extra></extra>", marker: { symbol: "line-ns",
        size: 7, line: { width: 1.5, color: BS.cssVar("--c-finished") } } });
    return { data: data, tickvals: tickvals, ticktext: ticktext, shown: n };
  }

  function hoverText(r, s, end, id) {
    const steps = s[1] === end ? "step " + s[1] : "steps " + s[1] + "–" + end;
    let line = "<b>" + id + "</b> " + LABEL[s[0]] + "<br>" + steps;
    if (s[0] === "prefill") line += " · " + s[3] + " tokens";
    else if (s[0] === "decode") line += " · " + s[3] + " tokens";
    else if (s[0] === "preempted") line += " · " + s[3] + " tokens lost";
    if (s[2] === null && r.waiting_reason) line += "<br>reason: " + esc(r.waiting_reason);
    return line + "<br>prompt " + r.num_prompt_tokens + " · max_tokens " + r.max_tokens;
  }

  function markerList(model, o) {
    const out = [];
    for (const m of model.markers) {
      const x = o.xmode === "step" ? m.step : model.timeOf(m.step);
      if (x !== null && x !== undefined) out.push({ x: x, label: m.label });
    }
    return out;
  }

  function renderMarkersList(model) {
    const ol = document.getElementById("config-markers");
    if (!ol) return;
    ol.replaceChildren();
    for (const m of model.markers) {
      const li = document.createElement("li");
      li.dataset.step = m.step;
      li.textContent = m.label;
      ol.appendChild(li);
    }
  }

  function draw(model) {
    const t0 = performance.now();
    st.drawn = model.ganttVersion;
    const fig = figure(model, st);
    st.shown = fig.shown;
    Plotly.react(st.el, fig.data, fig.layout, fig.config);
    if (st.markersDrawn !== model.markers.length || st.epoch !== model.epoch) {
      renderMarkersList(model);
      st.markersDrawn = model.markers.length;
      st.epoch = model.epoch;
    }
    const count = document.getElementById("gantt-count");
    if (count) {
      count.textContent = st.shown < model.order.length
        ? "showing the latest " + st.shown + " of " + model.order.length + " requests"
        : model.order.length + " requests";
    }
    st.el.dataset.rows = String(st.shown);
    st.el.dataset.renderMs = (performance.now() - t0).toFixed(1);
  }

  function render(model) {
    if (!st.el || !st.throttle) return;
    if (model.ganttVersion === st.drawn) return;
    st.throttle.poke(function () { draw(BS.model); });
  }

  /** {data, layout, config, shown} of the timeline of `model` (opts: xmode, rows). */
  function figure(model, opts) {
    const o = { xmode: opts.xmode || "step", rows: opts.rows || 0 };
    const b = build(model, o);
    return { data: b.data, layout: layout(b.tickvals, b.ticktext, markerList(model, o), model, o),
      config: config(), shown: b.shown };
  }
  BS.ganttFigure = figure;

  if (BS.register) BS.register({ name: "gantt", init: init, render: render });
})();
