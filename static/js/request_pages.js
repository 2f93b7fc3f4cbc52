/* request_pages.js: the request table's rows in replay, from the recording itself
 * (GET /api/sessions/ID/requests?step&offset&limit, X-Total-Count): every request of a
 * recording of any size, filtered and sorted by the server with the shared query
 * (filters.js). Pages of PAGE rows are fetched as the table scrolls to them and kept
 * until the step or the query changes; BS.requestPages.view(model, first, last) answers
 * {total, row(i)} from what is here and asks for what is missing. */
(function () {
  "use strict";
  const BS = (window.BS = window.BS || {});
  const PAGE = 100;
  const st = { key: "", total: null, pages: new Map(), loading: new Set(), onload: null };
  BS.requestPages = st;

  function key(model) {
    return BS.mode.replay + ":" + model.step + ":" + BS.filters.version;
  }

  async function load(k, page, model) {
    st.loading.add(page);
    const p = BS.filters.params();
    p.set("step", String(model.step));
    p.set("offset", String(page * PAGE));
    p.set("limit", String(PAGE));
    const url = "/api/sessions/" + encodeURIComponent(BS.mode.replay) + "/requests?" + p;
    try {
      const resp = await fetch(url, { credentials: "same-origin" });
      if (!resp.ok) throw new Error(BS.errorText ? BS.errorText(resp.status, await resp.text()) : resp.status);
      const rows = await resp.json();
      if (k !== st.key) return; // the step or the query moved on meanwhile
      st.total = parseInt(resp.headers.get("X-Total-Count") || "0", 10);
      st.pages.set(page, rows);
    } catch (e) {
      if (k === st.key && BS.flash) BS.flash(false, "request table: " + e.message);
    } finally {
      st.loading.delete(page);
      if (k === st.key && st.onload) st.onload();
    }
  }

  /** Rows first..last-1 of the table at the model's step (null where still loading). */
  st.view = function (model, first, last) {
    const k = key(model);
    if (k !== st.key) {
      st.key = k;
      st.pages = new Map(); // a new step or query: the old pages no longer hold
      st.loading = new Set();
    }
    const want = st.total === null ? [0] : [];
    for (let p = Math.floor(first / PAGE); p * PAGE < last; p++) want.push(p);
    for (const p of want) if (!st.pages.has(p) && !st.loading.has(p)) load(k, p, model);
    return {
      total: st.total === null ? 0 : st.total,
      ready: st.total !== null,
      row: function (i) {
        const page = st.pages.get(Math.floor(i / PAGE));
        return page ? page[i % PAGE] || null : null;
      },
    };
  };
})();
