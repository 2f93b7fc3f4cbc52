/* steps_table.js: the article-style step table, `step 0: {A:4, B:2}` with the step's token
 * total and preempted / finished notes, plus the session's running total. Rows are appended
 * incrementally (steps with no scheduled work are not listed); the DOM keeps MAX_ROWS.
 * The scroller is a column-reverse flex box, so it stays pinned to the newest row without
 * any layout reads here (reading scroll metrics every frame forces a page layout). */
import { pageModel } from "./live.js";
const MAX_ROWS = 200;
const st = { table: null, body: null, total: null, cursor: 0, epoch: -1 };
export { st as stepsTable };

/** plan: [[req, n], ...] (folded frames) or {req: n} (a snapshot's history). */
function planText(plan) {
  const pairs = Array.isArray(plan) ? plan : Object.entries(plan);
  return "{" + pairs.map((p) => p[0] + ":" + p[1]).join(", ") + "}";
}

function cell(tr, cls, text) {
  const td = document.createElement("td");
  td.className = cls;
  td.textContent = text;
  tr.appendChild(td);
  return td;
}

function row(s) {
  const tr = document.createElement("tr");
  tr.dataset.step = String(s.step);
  cell(tr, "step num", String(s.step));
  cell(tr, "plan", planText(s.plan));
  cell(tr, "tokens num", String(s.total));
  const notes = [];
  // Async scheduling: this step applied the output of an earlier step's batch.
  if (s.updated !== undefined && s.updated !== s.step) {
    notes.push(s.updated === null ? "output in flight" : "applied step " + s.updated);
  }
  if (s.preempted.length) notes.push("preempted " + s.preempted.join(", "));
  if (s.finished.length) notes.push("finished " + s.finished.join(", "));
  const td = cell(tr, "notes", notes.join("; "));
  if (s.preempted.length) td.classList.add("has-preempted");
  return tr;
}

function render(model) {
  if (!st.body) return;
  if (st.epoch !== model.epoch) {
    st.body.replaceChildren();
    st.cursor = Math.max(model.steps.base, model.steps.end - MAX_ROWS);
    st.epoch = model.epoch;
  }
  if (st.cursor === model.steps.end) return;
  const rows = model.steps.since(Math.max(st.cursor, model.steps.end - MAX_ROWS));
  st.cursor = model.steps.end;
  const frag = document.createDocumentFragment();
  for (const s of rows) frag.appendChild(row(s));
  st.body.appendChild(frag);
  while (st.body.childElementCount > MAX_ROWS) st.body.firstElementChild.remove();
  st.total.textContent = String(model.totalTokens);
  const count = document.getElementById("steps-count");
  if (count) count.textContent = String(model.steps.end) + " steps with work";
}

function init() {
  st.table = document.getElementById("steps-table");
  if (!st.table) return;
  st.body = st.table.querySelector("tbody");
  st.total = st.table.querySelector(".total-tokens");
  document.body.addEventListener("bs:snapshot", function () {
    if (st.total) st.total.textContent = String(pageModel.totalTokens);
  });
}

/** Drawn by live.js (registered by dashboard.js). */
export const renderer = { name: "steps", init: init, render: render };
