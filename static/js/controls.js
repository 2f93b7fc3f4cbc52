/* controls.js: glue between the htmx control forms and the live model. It keeps the
 * config form in step with the engine's knobs, sends only the knobs the user changed,
 * and turns JSON error answers (401/403/409/422/503) into a #flash message as text. */
(function () {
  "use strict";
  const BS = (window.BS = window.BS || {});
  const model = BS.model;

  // Keep the config form showing the live values (unless the user is editing a field),
  // and send only the knobs the user changed, so each change is one clear marker.
  function syncConfigForm() {
    const form = document.getElementById("config-form");
    if (!form) return;
    for (const el of form.querySelectorAll("[name]")) {
      if (!(el.name in model.config)) continue;
      const v = model.config[el.name];
      const s = v === null || v === undefined ? "" : String(v);
      el.dataset.current = s;
      if (document.activeElement !== el && !el.dataset.dirty) el.value = s;
    }
  }
  document.addEventListener("bs:config", syncConfigForm);
  document.addEventListener("bs:snapshot", syncConfigForm);
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

  function flash(ok, message) {
    const box = document.getElementById("flash");
    if (!box) return;
    const div = document.createElement("div");
    div.className = "flash " + (ok ? "flash-ok" : "flash-error");
    div.setAttribute("role", ok ? "status" : "alert");
    div.textContent = message; // text, never markup
    box.replaceChildren(div);
  }
  BS.flash = flash;

  document.addEventListener("htmx:beforeSwap", function (ev) {
    const xhr = ev.detail.xhr;
    if (!xhr || xhr.status < 400) return;
    ev.detail.shouldSwap = false;
    let message = "request failed (" + xhr.status + ")";
    try {
      const body = JSON.parse(xhr.responseText);
      if (body && typeof body.detail === "string") message = body.detail;
      else if (body && Array.isArray(body.detail) && body.detail[0] && body.detail[0].msg) {
        message = body.detail[0].msg;
      }
    } catch (e) { /* not JSON: keep the generic message */ }
    flash(false, message);
  });
  document.addEventListener("htmx:sendError", function () {
    flash(false, "the server did not answer (is it still running?)");
  });
})();
