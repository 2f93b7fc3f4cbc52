/* lab_form.js: the /lab sweep form. Shows the fields of the chosen source, and offers
 * typical values when a knob is picked (any comma-separated list can be typed); an
 * uploaded trace file is read into a hidden field. htmx
 * posts the form; the answer redirects to the new sweep's page (errors flash). */
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
  // An uploaded trace travels as its text (the form posts fields, not files).
  $("lab-trace-file").addEventListener("change", function () {
    const file = this.files && this.files[0];
    $("lab-trace-text").value = "";
    $("lab-trace-name").value = file ? file.name : "";
    if (file) file.text().then(function (text) { $("lab-trace-text").value = text; });
  });
  for (const [knob, values] of [["lab-knob", "lab-values"], ["lab-knob2", "lab-values2"]]) {
    $(knob).addEventListener("change", function () {
      $(values).value = suggested[$(knob).value] || "";
    });
  }
});
