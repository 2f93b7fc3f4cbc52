/* forensics.js: the selected request and its panel. select(req, {step}) (a Gantt row,
 * a table row, a KV block, a deep link `?req=ID&step=N`) asks the server for the
 * request's whole life, read from the recording (GET /api/requests/{req}?session=&step=),
 * so it is the same live, in replay and after a restart, and shows it (forensics_view.js).
 * In replay the life is cut at the step on screen and follows the scrubber; live, it is
 * refreshed while the request is still going. The URL carries the selection. */
import { STATUS } from "./protocol.js";
import { api, emit } from "./common.js";
import { renderLife } from "./forensics_view.js";
import { mode, pageModel, schedule } from "./live.js";
const REFRESH_MS = 3000;
/** The selected request: {req, step, life, error}, null when none. */
export let selection = null;
const st = { seq: 0, timer: null };

function $(id) { return document.getElementById(id); }

function setUrl(req, step) {
  const u = new URL(location.href);
  if (req === null) { u.searchParams.delete("req"); u.searchParams.delete("step"); }
  else {
    u.searchParams.set("req", req);
    if (step === null || step === undefined) u.searchParams.delete("step");
    else u.searchParams.set("step", String(step));
  }
  history.replaceState(null, "", u.pathname + u.search);
}

/** Select `req` and open its panel; opts.step cuts its life at that step. */
export function select(req, opts) {
  const o = opts || {};
  const step = o.step !== undefined && o.step !== null ? o.step
    : mode.replay ? pageModel.step : null;
  selection = { req: req, step: step, life: null, error: null };
  setUrl(req, step);
  $("req-panel").hidden = false;
  emit("bs:select", { req: req, step: step });
  load();
  schedule();
}

export function unselect() {
  selection = null;
  clearTimeout(st.timer);
  $("req-panel").hidden = true;
  setUrl(null);
  emit("bs:select", { req: null });
  schedule();
}

async function load() {
  const sel = selection;
  if (!sel) return;
  clearTimeout(st.timer);
  const seq = ++st.seq;
  const session = mode.replay || pageModel.session;
  const q = new URLSearchParams();
  if (session) q.set("session", session);
  if (sel.step !== null) q.set("step", String(sel.step));
  renderLife(sel, true);
  try {
    const life = await api("GET", "/api/requests/" + encodeURIComponent(sel.req) + "?" + q);
    if (seq !== st.seq || selection !== sel) return;
    sel.life = life;
    sel.error = null;
  } catch (e) {
    if (seq !== st.seq || selection !== sel) return;
    sel.error = e.message;
  }
  renderLife(sel, false);
  emit("bs:life", { req: sel.req });
  schedule();
  // Live and still going: refresh it now and then.
  const going = !sel.life || sel.life.status !== STATUS.FINISHED && sel.life.status !== STATUS.REJECTED;
  if (!mode.replay && sel.step === null && going) st.timer = setTimeout(load, REFRESH_MS);
}
export { load as reloadLife };

/** The blocks the selected request held after `step` (a Set of block ids), or null. */
export function selectedBlocks(step) {
  const life = selection && selection.life;
  if (!life) return null;
  const out = new Set();
  for (const b of life.blocks) {
    if (b.from <= step && (b.to === null || b.to >= step)) out.add(b.block);
  }
  return out;
}

function init() {
  const panel = $("req-panel");
  if (!panel) return;
  $("rq-close").addEventListener("click", unselect);
  $("rq-refresh").addEventListener("click", load);
  // Replay: the panel follows the step on screen.
  document.body.addEventListener("bs:replay-settled", function (ev) {
    const sel = selection;
    if (!sel || ev.detail.step === sel.step) return;
    sel.step = ev.detail.step;
    setUrl(sel.req, sel.step);
    load();
  });
  // A deep link: ?req=ID[&step=N] (replay: ?session=ID&req=..&step=..).
  const params = new URLSearchParams(location.search);
  const req = params.get("req");
  if (req) {
    // A step below the first (?step=-1) is the first, as for the replay (live.js).
    const step = params.has("step") ? Math.max(0, parseInt(params.get("step"), 10)) : null;
    const open = () => select(req, { step: isNaN(step) ? null : step });
    if (mode.replay) {
      document.body.addEventListener("bs:snapshot", function once() {
        document.body.removeEventListener("bs:snapshot", once);
        open();
      });
    } else {
      open();
    }
  }
}

/** Drawn by live.js (registered by dashboard.js). */
export const renderer = { name: "forensics", init: init, render: function () {} };
