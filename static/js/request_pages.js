/* request_pages.js: the request table's rows in replay, from the recording itself
 * (GET /api/sessions/ID/requests?step&offset&limit, X-Total-Count): every request of a
 * recording of any size, filtered and sorted by the server with the shared query
 * (filters.js). Pages of PAGE rows are fetched as the table scrolls to them and kept
 * until the step or the query changes; requestPages.view(model, first, last) answers
 * {total, row(i)} from what is here and asks for what is missing. The rows come with
 * their Gantt segments (segments=1): requestPages.gantt(model) gives the replay Gantt
 * the rows of the table's window (same query, same order), so paging or scrolling the
 * table reaches every request in the Gantt too (gantt.js). Live, the same paging serves a
 * view whose snapshot left requests out (model.leftOut: a compact snapshot after this
 * viewer fell behind): the live session's recording at its latest step, fetched again
 * every REFRESH_MS (the pages shown meanwhile stay until their successors arrive). */
import { SEGMENT } from "./protocol.js";
import { emit, errorText, flash } from "./common.js";
import { filters } from "./filters.js";
import { mode, pageModel } from "./live.js";
const PAGE = 100;
const REFRESH_MS = 2000;
const SEG = SEGMENT; // segment kinds (static/js/protocol.js)
const st = { key: "", total: null, totalKey: null, totalBase: null, pages: new Map(),
  prev: new Map(), loading: new Set(), onload: null, first: 0, last: 0, version: 0,
  drawn: null, tick: 0, timer: null, base: "" };
export { st as requestPages };

/** Rows come from here: in replay, and live when the snapshot left requests out. */
st.active = function (model) {
  return !!(mode.replay || (model && model.leftOut && model.session));
};
function live() { return !mode.replay; }
function sessionOf(model) { return mode.replay || model.session; }

/** A row for the Gantt (gantt_paint.js reads `segs`: [kind, start, end, tokens, hit]);
 * null when the server could not give its segments. */
function ganttRow(row) {
  if (!row.segments) return null;
  const segs = row.segments.map((s) => [s[0], s[1], s[2], s[3], 0]);
  const prefill = segs.find((s) => s[0] === SEG.PREFILL);
  if (prefill && row.prefix_hit) prefill[4] = row.prefix_hit;
  return Object.assign({}, row, { segments: undefined, segs: segs, marks: [] });
}

function changed() {
  st.version++;
  emit("bs:request-pages", {});
}

/** Live: the session, its snapshot and the query (a refresh keeps it). */
function baseKey(model) {
  return "live:" + model.session + ":" + model.epoch + ":" + filters.version;
}
function key(model) {
  if (live()) return baseKey(model) + ":" + st.tick;
  return mode.replay + ":" + model.step + ":" + filters.version;
}

/** Live: fetch the window's pages again every REFRESH_MS (not while some are on their
 * way), so the rows follow the session; stops once the view is whole again. */
function refresh() {
  if (!live() || st.timer) return;
  st.timer = setInterval(function () {
    if (!st.active(pageModel) || mode.replay) { clearInterval(st.timer); st.timer = null; return; }
    if (st.loading.size) return;
    st.tick++;
    changed();
  }, REFRESH_MS);
}

async function load(k, page, model) {
  st.loading.add(page);
  const p = filters.params();
  if (!live()) p.set("step", String(model.step)); // live: the latest recorded step
  p.set("offset", String(page * PAGE));
  p.set("limit", String(PAGE));
  p.set("segments", "1");
  const url = "/api/sessions/" + encodeURIComponent(sessionOf(model)) + "/requests?" + p;
  try {
    const resp = await fetch(url, { credentials: "same-origin" });
    if (!resp.ok) throw new Error(errorText(resp.status, await resp.text()));
    const rows = await resp.json();
    if (k !== st.key) return; // the step or the query moved on meanwhile
    st.total = parseInt(resp.headers.get("X-Total-Count") || "0", 10);
    st.totalKey = k;
    st.totalBase = live() ? baseKey(model) : null;
    for (const row of rows) {
      row.gantt = ganttRow(row);
      row.segments = undefined;
    }
    st.pages.set(page, rows);
    changed();
  } catch (e) {
    if (k === st.key && flash) flash(false, "request table: " + e.message);
  } finally {
    st.loading.delete(page);
    if (k === st.key && st.onload) st.onload();
  }
}

/** The rows matching at the model's step and the query on screen, over all pages; null
 * until the server answered for them (the total kept meanwhile is an earlier seek's).
 * Live, a refresh keeps the last answer for the same session and query meanwhile. */
st.count = function (model) {
  if (live()) return st.totalBase === baseKey(model) ? st.total : null;
  return st.totalKey === key(model) ? st.total : null;
};

function pageAt(n) { return st.pages.get(n) || st.prev.get(n); }

/** Rows first..last-1 of the table at the model's step (null where still loading). */
st.view = function (model, first, last) {
  const k = key(model);
  if (k !== st.key) {
    // A new step or query: the old pages no longer hold. Live, a refresh keeps them on
    // screen until their successors arrive (the same session, the same query).
    const base = baseKey(model);
    st.prev = live() && base === st.base ? new Map([...st.prev, ...st.pages]) : new Map();
    st.base = base;
    st.key = k;
    st.pages = new Map();
    st.loading = new Set();
    refresh();
  }
  if (first !== st.first || last !== st.last) {
    st.first = first;
    st.last = last;
    changed();
  }
  const want = st.total === null ? [0] : [];
  for (let p = Math.floor(first / PAGE); p * PAGE < last; p++) want.push(p);
  for (const p of want) if (!st.pages.has(p) && !st.loading.has(p)) load(k, p, model);
  return {
    total: st.total === null ? 0 : st.total,
    ready: st.total !== null,
    row: function (i) {
      const page = pageAt(Math.floor(i / PAGE));
      return page ? page[i % PAGE] || null : null;
    },
  };
};

/** The replay Gantt's rows: {ids, reqs} of the table's window at the model's step, in
 * the table's order (a row without segments from the server: the browser's fold's
 * row, if it holds one; else left out). Kept until a page or the window changes. */
st.gantt = function (model) {
  const k = key(model) + ":" + st.version;
  if (st.drawn && st.drawn.key === k) return st.drawn;
  const ids = [], reqs = new Map();
  // Live, a refresh's pages on their way: the ones shown before stay drawn meanwhile.
  if (st.key === key(model) || (live() && st.base === baseKey(model))) {
    for (let i = st.first; i < Math.min(st.last, st.total || 0); i++) {
      const page = pageAt(Math.floor(i / PAGE));
      const r = page ? page[i % PAGE] : null;
      const g = r ? r.gantt || model.reqs.get(r.req) : null;
      if (!g) continue;
      ids.push(r.req);
      reqs.set(r.req, g);
    }
  }
  // A seek's pages still on their way: the rows drawn before stay until they arrive.
  if (!ids.length && st.loading.size && st.drawn) return st.drawn;
  st.drawn = { key: k, ids: ids, reqs: reqs };
  return st.drawn;
};

/** The count beside the filters: the live model's, or the server's when paged. */
function renderCount(model) {
  const el = document.getElementById("req-count");
  if (!el) return;
  const pages = st.active(model);
  // Paged (replay, or live after a compaction): the server's count for this step and
  // query, once it answered (never an earlier seek's).
  const n = pages ? st.count(model) : filters.ids(model).length;
  const all = model.numRequests();
  const match = filters.params().toString() ? " match" : "";
  const text = pages ? (n === null ? "counting requests…" : n + " requests" + match)
    : n === all ? n + " requests" : n + " of " + all + " requests";
  if (el.textContent !== text) el.textContent = text;
}

function initCount() {
  // A replay page's count arrives with the server's answer, after the frame drew.
  document.body.addEventListener("bs:request-pages", () => renderCount(pageModel));
}

/** Drawn by live.js (registered by dashboard.js). */
export const countRenderer = { name: "count", init: initCount, render: renderCount };
