/* lab_form.js: the /lab sweep form. Shows the fields of the chosen source, and offers
 * typical values when a knob is picked (any comma-separated list can be typed). htmx
 * posts the form; the answer redirects to the new sweep's page (errors flash). */
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);

  document.addEventListener("DOMContentLoaded", function () {
    const form = $("lab-form");
    if (!form) return;
    const suggested = JSON.parse($("lab-suggested").textContent);
    const source = $("lab-source");
    function showSource() {
      for (const el of form.querySelectorAll("[data-source]")) {
        el.hidden = el.dataset.source !== source.value;
      }
    }
    source.addEventListener("change", showSource);
    showSource();
    for (const [knob, values] of [["lab-knob", "lab-values"], ["lab-knob2", "lab-values2"]]) {
      $(knob).addEventListener("change", function () {
        $(values).value = suggested[$(knob).value] || "";
      });
    }
  });
})();
