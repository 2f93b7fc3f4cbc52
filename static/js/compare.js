/* compare.js: draws each side's timeline from its recording's final state
 * (GET /api/sessions/{id}/state), folded by the same Model and drawn by the same
 * canvas view as the live page (GanttView), on one shared step axis; the first step
 * whose plans differ (#first-diff data-step, rendered by the server) is marked in both. */
import { FRAME } from "./protocol.js";
import { api, flash } from "./common.js";
import { GanttView } from "./gantt.js";
import { Model } from "./model.js";

async function load(el) {
  const id = el.dataset.session;
  const state = await api("GET", "/api/sessions/" + encodeURIComponent(id) + "/state");
  const model = new Model();
  model.loadSnapshot({ type: FRAME.SNAPSHOT, session: id, seq: state.seq || 0, data: state });
  return model;
}

async function draw() {
  const els = Array.from(document.querySelectorAll(".compare-gantt"));
  let models;
  try {
    models = await Promise.all(els.map(load));
  } catch (e) {
    flash(false, e.message);
    return;
  }
  const lastStep = Math.max(0, ...models.map((m) => m.step));
  const diff = (document.getElementById("first-diff") || { dataset: {} }).dataset.step;
  const diffStep = diff === undefined || diff === "" ? null : Number(diff);
  els.forEach(function (el, i) {
    const model = models[i];
    const ids = model.order.slice().reverse();
    const view = new GanttView(el, { model: () => model, ids: () => ids });
    view.autoX = false; // the same scale on both sides
    view.x0 = -0.5;
    view.x1 = lastStep + 1.5;
    if (diffStep !== null) {
      model.markers.push({ step: diffStep, label: "≠ " + diffStep });
      el.dataset.diffStep = String(diffStep);
    }
    view.draw();
    el.dataset.steps = String(model.step + 1);
  });
  document.body.dataset.drawn = "yes";
}

document.addEventListener("DOMContentLoaded", draw);
