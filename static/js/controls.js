/* controls.js: glue between the htmx control forms and the live model. Every control
 * names the session on screen (?session=ID), so it acts on that session's producer (a
 * pushed node's, not the local engine); it keeps the config form in step with the
 * engine's knobs and sends only the knobs the user changed (common.js turns error
 * answers into a #flash message). */
import { mode, pageModel } from "./live.js";

// The actions that go to the producer of a session (app/routes/control.py).
const CONTROL_PATH = /^\/api\/(requests(\/[^/?]+\/abort)?|config|pause|resume|step|workload)$/;

/** `path` aimed at the session on screen (a followed node's, else the live one shown). */
export function controlPath(path) {
  const session = mode.follow || pageModel.session;
  if (!session || !CONTROL_PATH.test(path)) return path;
  return path + (path.includes("?") ? "&" : "?") + "session=" + encodeURIComponent(session);
}
document.addEventListener("htmx:configRequest", function (ev) {
  if (ev.detail.verb !== "post") return;
  ev.detail.path = controlPath(ev.detail.path);
});

// Keep the config form showing the live values (unless the user is editing a field),
// and send only the knobs the user changed, so each change is one clear marker.
function syncConfigForm() {
  const form = document.getElementById("config-form");
  if (!form) return;
  for (const el of form.querySelectorAll("[name]")) {
    if (!(el.name in pageModel.config)) continue;
    const v = pageModel.config[el.name];
    const s = v === null || v === undefined ? "" : String(v);
    el.dataset.current = s;
    if (document.activeElement !== el && !el.dataset.dirty) el.value = s;
  }
}
document.addEventListener("bs:config", syncConfigForm);
document.addEventListener("bs:snapshot", syncConfigForm);

// Knobs of later vLLM releases (data-since): shown and enabled only when the form's
// release has them; a disabled field is never sent, so the engine keeps its default.
function versionKey(text) {
  const parts = String(text || "").replace(/^v/, "").split(".").slice(0, 2).map(Number);
  return parts.length === 2 && parts.every(Number.isFinite) ? parts : null;
}
function releaseHas(release, since) {
  const r = versionKey(release);
  const s = versionKey(since);
  return !r || !s || r[0] > s[0] || (r[0] === s[0] && r[1] >= s[1]);
}
function showLaterKnobs(form, release) {
  if (!form) return;
  const missing = [];
  for (const el of form.querySelectorAll("[data-since]")) {
    const has = releaseHas(release, el.dataset.since);
    el.hidden = !has;
    if (el.name !== undefined && el.tagName !== "LABEL") {
      el.disabled = !has;
      if (!has) missing.push(el.name);
    }
  }
  const note = form.querySelector("[data-later-note]");
  if (!note) return;
  note.hidden = missing.length === 0;
  note.querySelector(".later-release").textContent = release;
  note.querySelector(".later-missing").textContent = missing.join(", ");
}
function syncLaterKnobs() {
  showLaterKnobs(document.getElementById("config-form"), pageModel.config.vllm_version || "");
}
document.addEventListener("bs:config", syncLaterKnobs);
document.addEventListener("bs:snapshot", syncLaterKnobs);
document.addEventListener("change", function (ev) {
  if (ev.target.id !== "ns-release") return;
  showLaterKnobs(document.getElementById("new-session-form"), ev.target.value);
});
document.addEventListener("input", function (ev) {
  if (ev.target.closest && ev.target.closest("#config-form")) ev.target.dataset.dirty = "1";
});
document.addEventListener("htmx:configRequest", function (ev) {
  const form = ev.detail.elt;
  if (!form || form.id !== "config-form") return;
  const params = ev.detail.parameters;
  for (const el of form.querySelectorAll("[name]")) {
    if (el.dataset.current !== undefined && el.value === el.dataset.current) {
      if (typeof params.delete === "function") params.delete(el.name);
      else delete params[el.name];
    }
    delete el.dataset.dirty;
  }
});
