/* compare.js: draws each side's Gantt from its recording's final state
 * (GET /api/sessions/{id}/state), folded by the same BS.Model and drawn by the same
 * figure builder as the live view, on one shared step axis. */
(function () {
  "use strict";
  const BS = window.BS;

  async function load(el) {
    const id = el.dataset.session;
    const state = await BS.api("GET", "/api/sessions/" + encodeURIComponent(id) + "/state");
    const model = new BS.Model();
    model.loadSnapshot({ type: "snapshot", session: id, seq: state.seq || 0, data: state });
    return model;
  }

  async function draw() {
    const els = Array.from(document.querySelectorAll(".compare-gantt"));
    let models;
    try {
      models = await Promise.all(els.map(load));
    } catch (e) {
      BS.flash(false, e.message);
      return;
    }
    const lastStep = Math.max(0, ...models.map((m) => m.step));
    els.forEach(function (el, i) {
      const fig = BS.ganttFigure(models[i], { xmode: "step", rows: 0 });
      fig.layout.xaxis.range = [-0.5, lastStep + 1.5]; // the same scale on both sides
      Plotly.newPlot(el, fig.data, fig.layout, fig.config);
      el.dataset.rows = String(fig.shown);
      el.dataset.steps = String(models[i].step + 1);
    });
    document.body.dataset.drawn = "yes";
  }

  document.addEventListener("DOMContentLoaded", draw);
})();
