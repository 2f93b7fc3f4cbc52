/* request_table.js: the request table, virtualized: a spacer as tall as all rows and only
 * the rows in view (plus a margin) in the DOM, so 10,000 requests cost what 30 do. Rows
 * come from the browser's model in the order of the shared query (filters.js); clicking
 * a row opens its forensics panel, clicking a sortable header sorts by it. Live rows can
 * be aborted (with the control token). Every user-supplied string is set as text. */
(function () {
  "use strict";
  const BS = (window.BS = window.BS || {});
  const ROW = 22; // px per row (CSS .vtable tr height)
  const OVERSCAN = 8;
  const st = { scroll: null, space: null, body: null, key: "", pending: false, throttle: null };
  BS.requestTable = st;

  function ms(x) {
    if (x === null || x === undefined) return "–";
    return x >= 10 ? x.toFixed(1) + " s" : (x * 1000).toFixed(x >= 1 ? 0 : 1) + " ms";
  }
  function itl(r) {
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
    if (BS.selection && BS.selection.req === r.req) tr.classList.add("selected");
    cell(tr, "mono", r.req, r.req);
    const td = cell(tr, "", "");
    const badge = document.createElement("span");
    badge.className = "status status-" + status;
    badge.textContent = status;
    td.appendChild(badge);
    if (r.finish_reason) td.append(" " + r.finish_reason);
    cell(tr, "", BS.rowPhase(r) || "");
    cell(tr, "num", r.num_computed_tokens + " / " + r.num_tokens);
    cell(tr, "num", r.num_prompt_tokens + (r.prefix_hit ? " (hit " + r.prefix_hit + ")" : ""));
    cell(tr, "num", String(r.max_tokens));
    cell(tr, "num", String(r.priority));
    const t = BS.rowTimes(r);
    cell(tr, "num", ms(t.ttft));
    cell(tr, "num", ms(itl(r)));
    cell(tr, "num", ms(t.e2e));
    cell(tr, "num", String(r.num_preemptions));
    cell(tr, "num mode-async", r.placeholders ? String(r.placeholders) : "");
    cell(tr, "num mode-spec", r.num_draft_tokens ? r.num_accepted_tokens + " / " + r.num_draft_tokens : "");
    const why = r.waiting_reason ? BS.waitingText(r.req, r.waiting_reason, model.waitingDetail) : "";
    cell(tr, "reason", why, why);
    const act = cell(tr, "", "");
    if (control && !BS.mode.replay && (status === "running" || status === "waiting" || status === "preempted")) {
      const b = document.createElement("button");
      b.className = "small abort";
      b.type = "button";
      b.textContent = "abort";
      act.appendChild(b);
    }
    return tr;
  }

  function draw(model) {
    const ids = BS.filters.ids(model);
    st.space.style.height = ids.length * ROW + "px";
    const top = st.scroll.scrollTop;
    const first = Math.max(0, Math.floor(top / ROW) - OVERSCAN);
    const last = Math.min(ids.length, Math.ceil((top + st.viewH) / ROW) + OVERSCAN);
    const control = document.body.dataset.control === "1";
    const frag = document.createDocumentFragment();
    for (let i = first; i < last; i++) {
      const r = model.reqs.get(ids[i]);
      if (r) frag.appendChild(row(model, r, control));
    }
    if (!ids.length) {
      const tr = document.createElement("tr");
      cell(tr, "hint", model.order.length ? "No request matches the filters."
        : BS.mode.replay ? "No requests at this step."
          : "No requests yet: inject one, start the workload or load a scenario.");
      tr.firstChild.colSpan = 15;
      frag.appendChild(tr);
    }
    st.table.style.transform = "translateY(" + first * ROW + "px)";
    st.body.replaceChildren(frag);
    st.table.dataset.first = String(first);
    st.table.dataset.rows = String(ids.length);
  }

  function key(model) {
    const sel = BS.selection ? BS.selection.req : "";
    return model.epoch + ":" + model.ganttVersion + ":" + BS.filters.version + ":" + sel;
  }

  function soon() {
    if (st.pending) return;
    st.pending = true;
    requestAnimationFrame(function () { st.pending = false; st.key = key(BS.model); draw(BS.model); });
  }

  function render(model) {
    if (!st.body) return;
    const k = key(model);
    if (k === st.key) return;
    st.throttle.poke(function () { st.key = key(BS.model); draw(BS.model); });
  }

  function sortBy(name) {
    const cur = BS.filters.query.sort || "";
    const next = cur === "-" + name ? name : cur === name ? "-arrival" : "-" + name;
    BS.filters.set({ sort: next });
    const sel = document.querySelector('#req-filters [name="sort"]');
    if (sel) sel.value = next;
  }

  async function abort(req) {
    try {
      await BS.api("POST", "/api/requests/" + encodeURIComponent(req) + "/abort");
      BS.flash(true, "aborted " + req);
    } catch (e) { BS.flash(false, e.message); }
  }

  function init() {
    st.scroll = document.getElementById("req-scroll");
    if (!st.scroll) return;
    st.space = document.getElementById("req-space");
    st.table = document.getElementById("requests-table");
    st.body = st.table.querySelector("tbody");
    st.viewH = st.scroll.clientHeight || 360;
    // Not paused while scrolled out of view (unlike the charts): it draws ~30 rows.
    st.throttle = new BS.Throttle("table.draw", null, 250, 0.1);
    new ResizeObserver((e) => { st.viewH = e[e.length - 1].contentRect.height; soon(); }).observe(st.scroll);
    st.scroll.addEventListener("scroll", soon, { passive: true });
    document.body.addEventListener("bs:filter", function () { st.scroll.scrollTop = 0; soon(); });
    st.body.addEventListener("click", function (ev) {
      const tr = ev.target.closest("tr[data-req]");
      if (!tr) return;
      if (ev.target.closest("button.abort")) { abort(tr.dataset.req); return; }
      if (BS.select) BS.select(tr.dataset.req, {});
    });
    for (const th of document.querySelectorAll("#requests-head th[data-sort]")) {
      th.addEventListener("click", () => sortBy(th.dataset.sort));
    }
  }

  BS.register({ name: "table", init: init, render: render });
})();
