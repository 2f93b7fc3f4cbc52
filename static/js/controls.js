/* controls.js: glue between the htmx control forms and the live model. It keeps the
 * config form in step with the engine's knobs and sends only the knobs the user changed
 * (common.js turns error answers into a #flash message). */
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
})();
