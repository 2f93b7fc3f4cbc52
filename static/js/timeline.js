/* timeline.js: the dashboard's request timeline panel: a GanttView (gantt.js) over the
 * live model's rows in the shared query's order (filters.js), or, in replay and after a
 * compact snapshot, over the rows paged from the recording (request_pages.js); the config
 * markers under it; the selected request revealed. */
import { emit } from "./common.js";
import { filters } from "./filters.js";
import { select, selection } from "./forensics.js";
import { GanttView } from "./gantt.js";
import { mode, pageModel } from "./live.js";
import { requestPages } from "./request_pages.js";
import { Throttle } from "./throttle.js";
const st = { view: null, drawn: "", throttle: null };
export { st as timeline };

function key(model) {
  const sel = selection ? selection.req + ":" + selection.step : "";
  const pages = replayRows() ? ":" + requestPages.version : "";
  return model.epoch + ":" + model.ganttVersion + ":" + filters.version + ":" + sel + pages;
}

/** In replay the Gantt draws the request table's window, paged from the recording
 * (request_pages.js: every request of a recording of any size); live, the model, unless
 * its snapshot left requests out (then paged from the recording too). */
function replayRows() {
  return requestPages.active(pageModel);
}

/** The model the Gantt draws: in replay, the model with the table window's rows. */
function ganttModel() {
  if (!replayRows()) return pageModel;
  const rows = requestPages.gantt(pageModel);
  if (st.replay && st.replay.rows === rows && st.replay.base === pageModel) return st.replay.model;
  const view = Object.create(pageModel);
  view.reqs = rows.reqs;
  st.replay = { rows: rows, base: pageModel, model: view };
  return view;
}

function init() {
  const el = document.getElementById("gantt");
  if (!el) return;
  st.view = new GanttView(el, {
    model: ganttModel,
    ids: () => (replayRows() ? requestPages.gantt(pageModel).ids : filters.ids(pageModel)),
    selected: () => (selection ? selection.req : null),
    stepLine: () => (mode.replay ? pageModel.step : null),
    onSelect: (req, step) => select(req, { step: mode.replay ? step : null }),
  });
  st.throttle = new Throttle("gantt.draw", el, 100, 0.2);
  const xsel = document.getElementById("gantt-x");
  const rsel = document.getElementById("gantt-rowh");
  if (xsel) xsel.addEventListener("change", () => { st.view.xmode = xsel.value; st.view.fit(); });
  if (rsel) rsel.addEventListener("change", () => { st.view.rowMode = rsel.value; st.view.redraw(); });
  const fit = document.getElementById("gantt-fit");
  if (fit) fit.addEventListener("click", () => st.view.fit());
  document.body.addEventListener("bs:select", (ev) => { if (ev.detail.req) st.view.reveal(ev.detail.req); });
  // A page of the replay table arrived or its window moved: draw its rows.
  document.body.addEventListener("bs:request-pages", () => render(pageModel));
  renderMarkersList(pageModel);
}

function renderMarkersList(model) {
  const ol = document.getElementById("config-markers");
  if (!ol || st.markers === model.markers.length + ":" + model.epoch) return;
  st.markers = model.markers.length + ":" + model.epoch;
  ol.replaceChildren();
  for (const m of model.markers) {
    const li = document.createElement("li");
    li.dataset.step = m.step;
    li.textContent = m.label;
    ol.appendChild(li);
  }
}

/** `urgent`: the first frame after a snapshot draws at once, not when the throttle's
 * gap is over (a snapshot is what a first paint waits for). */
function render(model, urgent) {
  if (!st.view) return;
  renderMarkersList(model);
  const k = key(model);
  if (k === st.drawn) return;
  const draw = function () {
    st.drawn = key(pageModel);
    st.view.draw();
    if (!st.painted) { st.painted = true; requestAnimationFrame(() => emit("bs:painted", {})); }
  };
  if (urgent || !st.painted) st.throttle.now(draw); else st.throttle.poke(draw);
}

/** Drawn by live.js (registered by dashboard.js). */
export const renderer = { name: "gantt", init: init, render: render, first: true };
