/* request_table.js: the request table, virtualized: a spacer as tall as all rows and only
 * the rows in view (plus a margin) in the DOM, so 10,000 requests cost what 30 do. Rows
 * come from the browser's model in the order of the shared query (filters.js); in replay
 * from the recording itself, paged by the server (request_pages.js); clicking
 * a row opens its forensics panel, clicking a sortable header sorts by it. Live rows can
 * be aborted (with the control token). Every user-supplied string is set as text. */
import { STATUS } from "./protocol.js";
import { api, flash } from "./common.js";
import { controlPath } from "./controls.js";
import { filters, rowPhase, rowTimes } from "./filters.js";
import { select, selection } from "./forensics.js";
import { mode, pageModel } from "./live.js";
import { requestPages } from "./request_pages.js";
import { Throttle } from "./throttle.js";
import { waitingText } from "./waiting.js";
const ROW = 22; // px per row (CSS .vtable tr height)
const OVERSCAN = 8;
const TAP = 5; // px a pointer may move between press and release on a row and still select it
const st = { scroll: null, space: null, body: null, key: "", pending: false, throttle: null, n: 0 };
export { st as requestTable };

function ms(x) {
  if (x === null || x === undefined) return "–";
  return x >= 10 ? x.toFixed(1) + " s" : (x * 1000).toFixed(x >= 1 ? 0 : 1) + " ms";
}
function itl(r) {
  // A row from the server (replay: request_pages.js) brings its mean ITL; the model's
  // rows have their token times (and segments) instead.
  if (!r.segs && r.itl !== undefined) return r.itl;
  const out = r.num_tokens - r.num_prompt_tokens;
  if (r.first_token_t === null || r.first_token_t === undefined || !r.last_token_t || out < 2) return null;
  return (r.last_token_t - r.first_token_t) / (out - 1);
}

function cell(tr, cls, text, title) {
  const td = document.createElement("td");
  if (cls) td.className = cls;
  td.textContent = text;
  if (title) td.title = title;
  tr.appendChild(td);
  return td;
}

function row(model, r, control) {
  const tr = document.createElement("tr");
  tr.dataset.req = r.req;
  const status = r.status.toLowerCase();
  tr.dataset.status = status;
  if (selection && selection.req === r.req) tr.classList.add("selected");
  cell(tr, "mono", r.req, r.req);
  const td = cell(tr, "status-cell", "");
  const badge = document.createElement("span");
  badge.className = "status status-" + status;
  badge.textContent = status;
  td.appendChild(badge);
  // A reason code (stop, length, abort) follows the badge; a sentence (a rejection's) is
  // its title: the column holds one line.
  if (r.finish_reason && /\s/.test(r.finish_reason)) td.title = r.finish_reason;
  else if (r.finish_reason) td.append(" " + r.finish_reason);
  // Rows from the server (replay) carry their phase; the model's, their segments.
  cell(tr, "", (r.segs ? rowPhase(r) : r.phase) || "");
  cell(tr, "num", r.num_computed_tokens + " / " + r.num_tokens);
  cell(tr, "num", r.num_prompt_tokens + (r.prefix_hit ? " (hit " + r.prefix_hit + ")" : ""));
  cell(tr, "num", String(r.max_tokens));
  cell(tr, "num", String(r.priority));
  const t = rowTimes(r);
  cell(tr, "num", ms(t.ttft));
  cell(tr, "num", ms(itl(r)));
  cell(tr, "num", ms(t.e2e));
  cell(tr, "num", String(r.num_preemptions));
  cell(tr, "num mode-async", r.placeholders ? String(r.placeholders) : "");
  cell(tr, "num mode-spec", r.num_draft_tokens ? r.num_accepted_tokens + " / " + r.num_draft_tokens : "");
  // The reason's code fits its column whole; the sentence with its numbers is the title.
  const why = r.waiting_reason ? waitingText(r.req, r.waiting_reason, model.waitingDetail) : "";
  cell(tr, "reason", r.waiting_reason || "", why);
  const act = cell(tr, "", "");
  const live = r.status === STATUS.RUNNING || r.status === STATUS.WAITING ||
    r.status === STATUS.PREEMPTED;
  if (control && !mode.replay && live) {
    const b = document.createElement("button");
    b.className = "small abort";
    b.type = "button";
    b.textContent = "abort";
    act.appendChild(b);
  }
  return tr;
}

/** The rows to draw: the browser's model live; in replay, every request of the
 * recording at the step, paged from the server (request_pages.js). */
function source(model, first, last) {
  if (requestPages.active(model)) {
    const v = requestPages.view(model, first, last);
    return { n: v.total, ready: v.ready, at: v.row, empty: "No requests at this step." };
  }
  const ids = filters.ids(model);
  return {
    n: ids.length, ready: true, at: (i) => model.reqs.get(ids[i]),
    empty: "No requests yet: inject one, start the workload or load a scenario.",
  };
}

function placeholder(i) {
  const tr = document.createElement("tr");
  cell(tr, "hint", "…");
  tr.firstChild.colSpan = 15;
  tr.dataset.pending = String(i);
  return tr;
}

/** Give `old` the attributes of `now`, touching only those that differ. */
function syncAttrs(old, now) {
  for (const a of Array.from(old.attributes)) if (!now.hasAttribute(a.name)) old.removeAttribute(a.name);
  for (const a of Array.from(now.attributes)) {
    if (old.getAttribute(a.name) !== a.value) old.setAttribute(a.name, a.value);
  }
}

/** Make the node `old` draw as `now` in place, down the tree: a node of the same kind
 * keeps its identity (its text or attributes change), only a node of another kind is
 * replaced. A node replaced while a button is down on it loses the click (Chromium
 * sends none when the pressed node is gone by the release), so the row, the cell and the
 * status badge under the pointer must stay the nodes they were. */
function morph(old, now) {
  if (old.nodeType === Node.TEXT_NODE) {
    if (old.data !== now.data) old.data = now.data;
    return;
  }
  syncAttrs(old, now);
  const kids = Array.from(now.childNodes); // moved out of `now` below: a fixed list
  kids.forEach(function (n, j) {
    const o = old.childNodes[j];
    if (!o) old.appendChild(n);
    else if (o.isEqualNode(n)) return;
    else if (o.nodeType === n.nodeType && o.nodeName === n.nodeName) morph(o, n);
    else old.replaceChild(n, o);
  });
  while (old.childNodes.length > kids.length) old.lastChild.remove();
}

/** Put the drawn rows in the body, keeping the rows already there: a row replaced while
 * a button is down on it would lose the click (it goes to the table body). */
function place(rows) {
  const body = st.body;
  rows.forEach(function (tr, i) {
    const old = body.children[i];
    if (!old) body.appendChild(tr);
    else if (old.isEqualNode(tr)) return;
    else if (old.dataset.req && old.dataset.req === tr.dataset.req) morph(old, tr);
    else body.replaceChild(tr, old);
  });
  while (body.children.length > rows.length) body.lastElementChild.remove();
}

function draw(model) {
  const top = st.scroll.scrollTop;
  const first = Math.max(0, Math.floor(top / ROW) - OVERSCAN);
  const src = source(model, first, first + Math.ceil(st.viewH / ROW) + 2 * OVERSCAN);
  // Rows the server has not counted yet (the table turned to pages: a compact snapshot):
  // the table keeps its height meanwhile, rows pending, so the place scrolled to stays
  // (a spacer of 0 rows would scroll the table back to its top for good).
  const n = src.ready ? src.n : st.n;
  st.n = n;
  const last = Math.min(n, Math.ceil((top + st.viewH) / ROW) + OVERSCAN);
  st.space.style.height = n * ROW + "px";
  const control = document.body.dataset.control === "1";
  const rows = [];
  for (let i = first; i < last; i++) {
    const r = src.at(i);
    rows.push(r ? row(model, r, control) : placeholder(i));
  }
  if (!src.n && src.ready) {
    const tr = document.createElement("tr");
    cell(tr, "hint", model.order.length && !mode.replay ? "No request matches the filters."
      : mode.replay && filters.params().toString() ? "No request matches the filters."
        : src.empty);
    tr.firstChild.colSpan = 15;
    rows.push(tr);
  }
  st.table.dataset.total = String(n);
  st.table.dataset.ready = String(src.ready);
  st.table.style.transform = "translateY(" + first * ROW + "px)";
  place(rows);
  st.table.dataset.first = String(first);
  st.table.dataset.rows = String(n);
}

function key(model) {
  const sel = selection ? selection.req : "";
  const step = mode.replay ? ":" + model.step : model.leftOut ? ":" + requestPages.version : "";
  return model.epoch + ":" + model.ganttVersion + ":" + filters.version + ":" + sel + step;
}

function soon() {
  if (st.pending) return;
  st.pending = true;
  requestAnimationFrame(function () { st.pending = false; st.key = key(pageModel); draw(pageModel); });
}

function render(model) {
  if (!st.body) return;
  const k = key(model);
  if (k === st.key) return;
  st.throttle.poke(function () { st.key = key(pageModel); draw(pageModel); });
}

function sortBy(name) {
  const cur = filters.query.sort || "";
  const next = cur === "-" + name ? name : cur === name ? "-arrival" : "-" + name;
  filters.set({ sort: next });
  const sel = document.querySelector('#req-filters [name="sort"]');
  if (sel) sel.value = next;
}

async function abort(req) {
  try {
    await api("POST", controlPath("/api/requests/" + encodeURIComponent(req) + "/abort"));
    flash(true, "aborted " + req);
  } catch (e) { flash(false, e.message); }
}

function init() {
  st.scroll = document.getElementById("req-scroll");
  if (!st.scroll) return;
  st.space = document.getElementById("req-space");
  st.table = document.getElementById("requests-table");
  st.body = st.table.querySelector("tbody");
  st.viewH = st.scroll.clientHeight || 360;
  // Not paused while scrolled out of view (unlike the charts): it draws ~30 rows.
  st.throttle = new Throttle("table.draw", null, 250, 0.1);
  // A page arrived: draw it (through the throttle: rAF waits while the tab is hidden).
  requestPages.onload = function () {
    st.throttle.poke(function () { st.key = key(pageModel); draw(pageModel); });
  };
  new ResizeObserver((e) => { st.viewH = e[e.length - 1].contentRect.height; soon(); }).observe(st.scroll);
  st.scroll.addEventListener("scroll", soon, { passive: true });
  document.body.addEventListener("bs:filter", function () { st.scroll.scrollTop = 0; soon(); });
  // A press on a row and a release where it was pressed select that row, whatever drew
  // in between: a click goes to the nodes under both press and release, so a row
  // redrawn or moved under a still pointer would not get one.
  let pressed = null;
  st.body.addEventListener("pointerdown", function (ev) {
    const tr = ev.button === 0 && !ev.target.closest("button") && ev.target.closest("tr[data-req]");
    pressed = tr ? { req: tr.dataset.req, x: ev.clientX, y: ev.clientY } : null;
  });
  window.addEventListener("pointercancel", function () { pressed = null; });
  window.addEventListener("pointerup", function (ev) {
    const p = pressed;
    pressed = null;
    if (!p || Math.abs(ev.clientX - p.x) > TAP || Math.abs(ev.clientY - p.y) > TAP) return;
    select(p.req, {});
  });
  st.body.addEventListener("click", function (ev) {
    const tr = ev.target.closest("tr[data-req]");
    if (tr && ev.target.closest("button.abort")) abort(tr.dataset.req);
  });
  for (const th of document.querySelectorAll("#requests-head th[data-sort]")) {
    th.addEventListener("click", () => sortBy(th.dataset.sort));
  }
}

/** Drawn by live.js (registered by dashboard.js). */
export const renderer = { name: "table", init: init, render: render };
