/* sessions.js: the recordings table. Inline rename (PATCH), delete after a confirm
 * (DELETE), and "tick two rows -> Compare". Rows come from the server (htmx swaps them on
 * filtering); every handler is delegated and reads ids from data attributes, and user
 * text is only ever set as textContent / input values. */
import { api, flash } from "./common.js";
const $ = (id) => document.getElementById(id);
const path = (id) => "/api/sessions/" + encodeURIComponent(id);

function picked() {
  return Array.from(document.querySelectorAll("#sessions-rows input.pick:checked"),
    (el) => el.value);
}
function syncCompare() {
  const n = picked().length;
  const btn = $("btn-compare");
  btn.disabled = n !== 2;
  btn.title = n === 2 ? "compare the two ticked sessions" : "tick two sessions (" + n + " ticked)";
}

function startRename(tr) {
  const cell = tr.querySelector("td.name");
  if (cell.querySelector("form")) return;
  const current = cell.querySelector(".name-text").textContent;
  const form = document.createElement("form");
  form.className = "rename-form";
  const input = document.createElement("input");
  input.type = "text"; input.name = "name"; input.maxLength = 200; input.required = true;
  input.value = current;
  input.setAttribute("aria-label", "new name");
  const save = document.createElement("button");
  save.type = "submit"; save.className = "small primary"; save.textContent = "save";
  const cancel = document.createElement("button");
  cancel.type = "button"; cancel.className = "small"; cancel.textContent = "cancel";
  form.append(input, save, cancel);
  cell.querySelector(".name-text").hidden = true;
  cell.appendChild(form);
  input.focus();
  input.select();
  const close = function () { form.remove(); cell.querySelector(".name-text").hidden = false; };
  cancel.addEventListener("click", close);
  input.addEventListener("keydown", function (ev) { if (ev.key === "Escape") close(); });
  form.addEventListener("submit", async function (ev) {
    ev.preventDefault();
    save.disabled = true;
    try {
      const out = await api("PATCH", path(tr.dataset.session), { name: input.value });
      cell.querySelector(".name-text").textContent = out.name;
      close();
      flash(true, "renamed " + tr.dataset.session);
    } catch (e) {
      flash(false, e.message);
      save.disabled = false;
    }
  });
}

async function remove(tr) {
  const id = tr.dataset.session;
  const name = tr.querySelector(".name-text").textContent;
  if (!window.confirm("Delete the recording " + id + " (" + name + ")? This cannot be undone.")) {
    return;
  }
  try {
    await api("DELETE", path(id));
    tr.remove();
    syncCompare();
    flash(true, "deleted " + id);
  } catch (e) {
    flash(false, e.message);
  }
}

document.addEventListener("DOMContentLoaded", function () {
  const table = $("sessions-table");
  table.addEventListener("click", function (ev) {
    const btn = ev.target.closest("button");
    const tr = btn && btn.closest("tr[data-session]");
    if (!tr) return;
    if (btn.classList.contains("rename")) startRename(tr);
    else if (btn.classList.contains("delete")) remove(tr);
  });
  table.addEventListener("change", function (ev) {
    if (ev.target.classList.contains("pick")) syncCompare();
  });
  document.body.addEventListener("htmx:afterSwap", syncCompare);
  $("btn-compare").addEventListener("click", function () {
    const ids = picked();
    if (ids.length !== 2) return;
    location.assign("/compare?a=" + encodeURIComponent(ids[0]) + "&b=" +
      encodeURIComponent(ids[1]));
  });
  syncCompare();
});
