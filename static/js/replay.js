/* replay.js: the scrubber of a replayed recording (<body data-replay="ID">). It steers the
 * replay on the live socket (live.js send): seek answers with a snapshot, play / step
 * stream the recorded frames, which fold into the same model and renderers as live.
 * It also points the htmx panels at the step on screen, lends space / ←/→ to keys.js and
 * runs the re-run form. */
import { REPLAY } from "./protocol.js";
import { api, emit, flash } from "./common.js";
import { conn, expectSnapshot, pageModel, send } from "./live.js";
const SETTLE_MS = 400; // panels (requests, latency) refresh at most this often
const DRAG_MS = 150; // seek while dragging the scrubber, at most this often
const st = { steps: 0, playing: false, speed: 1, dragTimer: null, settleTimer: null,
  shownStep: null, shownEpoch: null };
export { st as replay };
const $ = (id) => document.getElementById(id);

/** Send a replay command; one a snapshot answers makes the frames until it stale. */
function steer(msg, answeredBySnapshot) {
  if (answeredBySnapshot) expectSnapshot();
  if (!send(msg)) flash(false, "not connected to the server; reconnecting");
}
function seek(step) {
  st.playing = false;
  steer({ type: REPLAY.SEEK, step: step }, true);
  ui();
}
function play() {
  if (st.steps <= 0) return;
  if (pageModel.step >= st.steps - 1) steer({ type: REPLAY.SEEK, step: 0 }, true); // from the top
  st.playing = true;
  steer({ type: REPLAY.PLAY, speed: st.speed });
  ui();
}
function pause() {
  st.playing = false;
  steer({ type: REPLAY.PAUSE });
  ui();
}
function stepBy(delta) {
  st.playing = false;
  steer({ type: REPLAY.STEP, delta: delta }, delta < 0);
  ui();
}

// The keyboard (keys.js): space plays / pauses, ←/→ step.
st.toggle = function () { if (st.playing) pause(); else play(); };
st.stepBy = function (delta) {
  const step = pageModel.step + delta;
  if (st.playing || step < 0 || step > st.steps - 1) return;
  stepBy(delta);
};

// ------------------------------------------------------------------ view
function ui() {
  const step = pageModel.step;
  const last = st.steps - 1;
  const scrub = $("rp-scrub");
  if (scrub) {
    scrub.max = String(Math.max(last, 0));
    scrub.disabled = last < 0;
    if (document.activeElement !== scrub || st.playing) scrub.value = String(Math.max(step, 0));
  }
  $("rp-step").textContent = String(step);
  $("rp-last").textContent = String(last);
  $("rp-steps").textContent = st.steps.toLocaleString("en-US") + " steps";
  const btn = $("rp-play");
  btn.textContent = st.playing ? "Pause" : "Play";
  btn.dataset.playing = String(st.playing);
  btn.disabled = last < 0;
  $("rp-back").disabled = st.playing || step <= 0;
  $("rp-fwd").disabled = st.playing || step >= last;
}

// Panels (requests table, latency) follow the step on screen, trailing-throttled.
function settleSoon() {
  if (st.settleTimer) return;
  st.settleTimer = setTimeout(function () {
    st.settleTimer = null;
    emit("bs:replay-settled", { step: pageModel.step });
  }, SETTLE_MS);
}

function render(model) {
  if (model.step >= st.steps) st.steps = model.step + 1; // a recording still growing
  // The end of the recording ends play (unless a seek to the top is still in flight).
  if (st.playing && !conn.awaitingSnapshot && model.step >= st.steps - 1) {
    st.playing = false;
  }
  if (model.step !== st.shownStep || model.epoch !== st.shownEpoch) {
    st.shownStep = model.step;
    st.shownEpoch = model.epoch;
    settleSoon();
  }
  ui();
}

// ------------------------------------------------------------------ wiring
function init() {
  st.steps = parseInt($("scrubber").dataset.steps, 10) || 0;
  $("rp-play").addEventListener("click", function () { if (st.playing) pause(); else play(); });
  $("rp-back").addEventListener("click", function () { stepBy(-1); });
  $("rp-fwd").addEventListener("click", function () { stepBy(1); });
  $("rp-speed").addEventListener("change", function (ev) {
    st.speed = parseFloat(ev.target.value) || 1;
    if (st.playing) steer({ type: REPLAY.PLAY, speed: st.speed });
  });
  const scrub = $("rp-scrub");
  scrub.addEventListener("input", function () {
    $("rp-step").textContent = scrub.value;
    clearTimeout(st.dragTimer);
    st.dragTimer = setTimeout(function () { seek(parseInt(scrub.value, 10)); }, DRAG_MS);
  });
  scrub.addEventListener("change", function () {
    clearTimeout(st.dragTimer);
    seek(parseInt(scrub.value, 10));
  });
  document.body.addEventListener("bs:replay", function (ev) {
    st.steps = ev.detail.steps;
    ui();
  });
  // htmx panels of this page ask for the recorded state at the step on screen.
  document.body.addEventListener("htmx:configRequest", function (ev) {
    if (!ev.detail.path.startsWith("/panels/")) return;
    const params = ev.detail.parameters;
    const step = String(pageModel.step);
    if (typeof params.set === "function") params.set("step", step); else params.step = step;
  });
  const form = $("rerun-form");
  for (const el of form.querySelectorAll("[name]")) el.dataset.initial = el.value;
  form.addEventListener("submit", rerun);
  ui();
}

async function rerun(ev) {
  ev.preventDefault();
  const form = ev.target;
  const body = {};
  for (const el of form.querySelectorAll("[name]")) {
    if (el.dataset.always ? el.value !== "" : el.value !== el.dataset.initial) {
      body[el.name] = el.value;
    }
  }
  const button = $("btn-rerun");
  button.disabled = true;
  flash(true, "re-running the recording's arrivals…");
  try {
    const source = form.dataset.session;
    const out = await api("POST", "/api/sessions/" + encodeURIComponent(source) + "/rerun",
      body);
    location.assign("/compare?a=" + encodeURIComponent(source) + "&b=" +
      encodeURIComponent(out.session));
  } catch (e) {
    flash(false, e.message);
    button.disabled = false;
  }
}

/** Drawn by live.js (registered by dashboard.js). */
export const renderer = { name: "replay", init: init, render: render };
