/* filters.js: the request query the timeline and the request table share: filters
 * (status, waiting reason, priority, phase, prefix hit, preempted, id) and a sort
 * (arrival, TTFT, E2E, preemptions; "-" first = descending). The same query, with the same
 * names and meaning, as the JSON twin (app/request_table.py): the "JSON" link opens the
 * twin with the query on screen. filters.ids(model) is the ordered list of request ids
 * to show, recomputed only when the model or the query changed. */
import { STATUS } from "./protocol.js";
import { emit } from "./common.js";
import { ANY, DESCENDING, LIST_SEPARATOR, QUERY_KEYS, SORTS, SORT_FIELDS, YES } from "./query.js";
import { mode, pageModel, schedule } from "./live.js";
// The query's words and operators, generated from app/request_table.py (static/js/query.js).
const ARRIVAL = SORTS[0]; // the default order
const st = { query: { sort: DESCENDING + ARRIVAL }, version: 0, key: "", list: [], total: 0 };
export { st as filters };

/** TTFT / E2E in seconds (null until known) and the phase of a running request. */
export function rowTimes(r) {
  const arrived = r.arrived_t;
  const ttft = r.first_token_t !== null && r.first_token_t !== undefined && arrived !== null
    ? r.first_token_t - arrived : null;
  const e2e = r.status === STATUS.FINISHED && r.finish_t !== null && r.finish_t !== undefined &&
    arrived !== null ? r.finish_t - arrived : null;
  return { ttft: ttft, e2e: e2e };
}
export function rowPhase(r) {
  if (r.status !== STATUS.RUNNING || !r.segs.length) return null;
  return r.segs[r.segs.length - 1][0];
}

function flag(v) { return v === "" || v === undefined || v === ANY ? null : YES[v]; }

/** A predicate for app/request_table.py's RequestQuery.matches. */
function matcher(q) {
  const status = (q.status || "").split(LIST_SEPARATOR).filter(Boolean);
  const prio = q.priority === "" || q.priority === undefined ? null : Number(q.priority);
  const hit = flag(q.prefix_hit);
  const pre = flag(q.preempted);
  const needle = (q.q || "").trim().toLowerCase();
  return function (r) {
    if (status.length && status.indexOf(r.status.toLowerCase()) < 0) return false;
    if (q.reason && r.waiting_reason !== q.reason) return false;
    if (prio !== null && r.priority !== prio) return false;
    if (q.phase && rowPhase(r) !== q.phase) return false;
    if (hit !== null && hit !== undefined && !!r.prefix_hit !== hit) return false;
    if (pre !== null && pre !== undefined && !!r.num_preemptions !== pre) return false;
    return !needle || String(r.req).toLowerCase().indexOf(needle) >= 0;
  };
}

/** A row's value for a sort (app/request_table.py's SORT_FIELDS): a field of the row, or
 * a time the page computes (rowTimes). */
function sortValue(sort) {
  const field = SORT_FIELDS[sort];
  return (r) => (field in r ? r[field] : rowTimes(r)[field]);
}

/** Request ids of `model` that the query keeps, in its order. */
st.ids = function (model) {
  const key = model.epoch + ":" + model.ganttVersion + ":" + model.order.length + ":" + st.version;
  if (key === st.key) return st.list;
  const q = st.query;
  const keep = matcher(q);
  let rows = [];
  for (const id of model.order) {
    const r = model.reqs.get(id);
    if (r && keep(r)) rows.push(r);
  }
  const desc = (q.sort || "").startsWith(DESCENDING);
  const sort = desc ? q.sort.slice(DESCENDING.length) : q.sort || ARRIVAL;
  if (Object.hasOwn(SORT_FIELDS, sort)) {
    const val = sortValue(sort);
    const known = [], unknown = [];
    for (const r of rows) {
      const v = val(r);
      if (v === null || v === undefined) unknown.push(r); else known.push([v, r]);
    }
    known.sort(desc ? (a, b) => b[0] - a[0] : (a, b) => a[0] - b[0]); // stable: ties by arrival
    rows = known.map((x) => x[1]).concat(unknown);
  } else if (desc) {
    rows.reverse();
  }
  st.key = key;
  st.list = rows.map((r) => r.req);
  st.total = model.order.length;
  return st.list;
};

/** The query as URL parameters (only what is set). */
st.params = function () {
  const p = new URLSearchParams();
  for (const k of QUERY_KEYS) {
    const v = st.query[k];
    if (v !== undefined && v !== "" && !(k === "sort" && v === ARRIVAL)) p.set(k, v);
  }
  return p;
};

/** The JSON twin of what is on screen: the live table or the recording's at the step. */
st.twinHref = function (model) {
  const p = st.params();
  if (mode.replay) {
    p.set("step", String(model.step));
    return "/api/sessions/" + encodeURIComponent(mode.replay) + "/requests?" + p;
  }
  if (mode.follow) p.set("live", mode.follow);
  return "/api/requests?" + p;
};

st.set = function (changes) {
  Object.assign(st.query, changes);
  st.version++;
  st.key = "";
  emit("bs:filter", { query: Object.assign({}, st.query) });
  schedule();
};

function init() {
  const form = document.getElementById("req-filters");
  if (!form) return;
  for (const el of form.querySelectorAll("[name]")) {
    if (el.name in st.query) el.value = st.query[el.name];
    const ev = el.tagName === "INPUT" ? "input" : "change";
    el.addEventListener(ev, function () {
      const c = {};
      c[el.name] = el.value.trim();
      st.set(c);
    });
  }
  form.addEventListener("submit", (ev) => ev.preventDefault());
  const link = document.getElementById("req-twin");
  if (link) {
    const refresh = () => { link.href = st.twinHref(pageModel); };
    link.addEventListener("mouseenter", refresh);
    link.addEventListener("focus", refresh);
    link.addEventListener("click", refresh);
  }
}

/** Drawn by live.js (registered by dashboard.js). */
export const renderer = { name: "filters", init: init, render: function () {} };
