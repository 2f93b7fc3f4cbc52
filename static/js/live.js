/* live.js: owns the /ws/live websocket, folds protocol-v1 frames into one client model
 * (pageModel) and calls the registered renderers at most ~25 times a second. The model
 * itself is built by model.js (Model); this file is transport + scheduling only.
 * <body data-replay="ID"> opens a replay of that recording on the same socket (replay.js
 * steers it with send); <body data-follow="ID"> follows that live session. */
import { FRAME, MESSAGE } from "./protocol.js";
import { emit } from "./common.js";
import { Model } from "./model.js";
import { liveHello, openSocket, takeEarlySocket } from "./socket.js";
import { timed } from "./throttle.js";
const MIN_FRAME_MS = 40; // ~25 fps ceiling for all renderers together
const renderers = [];
/** Add a renderer ({name, init?, render, first?}); they init and draw in this order. */
export function register(renderer) { renderers.push(renderer); }
/** The model this page draws (live, followed or replayed): every renderer gets it. */
export const pageModel = new Model();
const model = pageModel;
const startStep = parseInt(new URLSearchParams(location.search).get("step"), 10);
export const mode = {
  replay: document.body.dataset.replay || null,
  follow: document.body.dataset.follow || null,
  // A step in the URL below the first (?step=-1) opens the first step.
  startStep: isNaN(startStep) ? null : Math.max(0, startStep),
};
export const conn = {
  ws: null, state: "connecting", awaitingSnapshot: true, backoff: 250,
  frames: 0, snapshots: 0, renders: 0,
};

function setConnState(state) {
  conn.state = state;
  const label = mode.replay && state === "live" ? "replay" : state;
  const el = document.getElementById("conn-state");
  if (el) { el.textContent = label; el.dataset.state = label; }
}

/** Send a command on the socket (replay steering); false while disconnected. */
export function send(msg) {
  if (!conn.ws || conn.ws.readyState !== WebSocket.OPEN) return false;
  conn.ws.send(JSON.stringify(msg));
  return true;
}
/** Frames until the next snapshot are stale (a replay seek answers with one). */
export function expectSnapshot() { conn.awaitingSnapshot = true; }

function hello() {
  conn.awaitingSnapshot = true;
  if (mode.replay) {
    const msg = { type: MESSAGE.HELLO, session: mode.replay, mode: "replay" };
    // A reconnect resumes the replay at the step on screen; a deep link (?step=N) opens
    // the replay at that step.
    if (model.session === mode.replay && model.step >= 0) msg.step = model.step;
    else if (mode.startStep !== null) msg.step = mode.startStep;
    send(msg);
  } else {
    send(liveHello(mode.follow));
  }
}
export { hello as resync };

function connect() {
  // The first time, take over the socket socket.js opened while the page loaded, with
  // the messages it got meanwhile. A live page's hello travels in the socket's URL; a
  // replay's is sent once open (it carries the step on screen).
  const pre = takeEarlySocket();
  const adopt = pre && pre.ws.readyState <= WebSocket.OPEN;
  const ws = adopt ? pre.ws : openSocket(mode.replay ? null : liveHello(mode.follow));
  conn.ws = ws;
  conn.awaitingSnapshot = true;
  setConnState("connecting");
  if (adopt && ws.readyState === WebSocket.OPEN) {
    conn.openAt = pre.openAt;
    setConnState("live");
  } else {
    ws.onopen = function () {
      conn.openAt = performance.now();
      setConnState("live");
      if (mode.replay) hello();
    };
  }
  ws.onmessage = function (ev) {
    if (ready) receive(ev.data, performance.now()); else early.push([ev.data, performance.now()]);
  };
  if (adopt) for (const m of pre.messages.splice(0)) early.push(m);
  ws.onclose = function () {
    if (conn.ws !== ws) return;
    setConnState("reconnecting");
    const wait = conn.backoff;
    conn.backoff = Math.min(conn.backoff * 2, 5000);
    setTimeout(connect, wait);
  };
  ws.onerror = function () { /* onclose follows and reconnects */ };
}

// Messages that came before the page was ready wait for the renderers' init (their
// listeners of bs:* events must exist when the snapshot is folded).
const early = [];
function receive(data, at) {
  const t0 = performance.now();
  let msg;
  try { msg = JSON.parse(data); } catch (e) { return; }
  if (!Array.isArray(msg) && msg.type === FRAME.SNAPSHOT) {
    conn.snapshotAt = at; // received; parsed after parseMs, folded after foldMs
    conn.parseMs = performance.now() - t0;
  }
  timed("fold", function () {
    if (Array.isArray(msg)) { for (const f of msg) onFrame(f); } else { onFrame(msg); }
  });
  // A snapshot's first picture is drawn right away, not in the next animation frame.
  if (conn.fresh && ready) render(performance.now(), true); else schedule();
}

function onFrame(f) {
  if (!f || typeof f !== "object") return;
  conn.frames++;
  if (f.type === FRAME.SNAPSHOT) {
    clearTimeout(conn.gapTimer);
    // The panels the server rendered with the page show its session already: the first
    // snapshot of that same session is no news to them (no refetch before the paint).
    const rendered = !conn.snapshots && f.session === document.body.dataset.session;
    const newSession = f.session !== model.session && !rendered;
    const t0 = performance.now();
    model.loadSnapshot(f);
    conn.foldMs = performance.now() - t0;
    conn.awaitingSnapshot = false;
    conn.backoff = 250;
    conn.snapshots++;
    conn.fresh = true;
    setConnState("live");
    if (newSession) emit("bs:session", { session: f.session });
    emit("bs:snapshot", { session: f.session, seq: f.seq });
    if (f.data && f.data.replay) emit("bs:replay", f.data.replay);
    return;
  }
  if (f.type === FRAME.GAP) {
    // The server follows a gap with a fresh snapshot; ask again only if none comes.
    setConnState("resync");
    conn.awaitingSnapshot = true;
    clearTimeout(conn.gapTimer);
    conn.gapTimer = setTimeout(function () { if (conn.awaitingSnapshot) hello(); }, 1500);
    return;
  }
  if (f.type === MESSAGE.PING) { send({ type: MESSAGE.PONG, id: f.data && f.data.id }); return; }
  if (f.type === MESSAGE.ERROR) { console.warn("server:", f.data && f.data.detail); return; }
  if (conn.awaitingSnapshot) return; // frames before the (new) snapshot are folded into it
  if (f.session !== model.session) { hello(); return; } // a new session began: resync
  if (f.seq <= model.seq) return; // already folded into the snapshot
  if (f.seq !== model.seq + 1) { setConnState("resync"); hello(); return; }
  model.seq = f.seq;
  const events = model.apply(f);
  for (const e of events) emit(e.name, e.detail);
}

// ---------------------------------------------------------------- render loop
let rafPending = false;
let lastRender = 0;
function schedule() {
  if (rafPending) return;
  rafPending = true;
  requestAnimationFrame(tick);
}
function tick(now) {
  rafPending = false;
  render(now, false);
}
/** `force`: draw now, however recent the last frame (a snapshot's first picture). */
function render(now, force) {
  // The first tick comes after DOMContentLoaded; nothing is drawn before the first
  // snapshot (an empty picture would only delay the first real one).
  if (!ready || !conn.snapshots) return;
  if (now - lastRender < MIN_FRAME_MS && !force) { schedule(); return; }
  lastRender = now;
  conn.renders++;
  // Right after a snapshot only the renderers marked `first` (the timeline) draw, at
  // once (`urgent`: not held back by their throttle), so the first picture is on screen
  // before the charts and tables take their turn.
  const firstOnly = conn.fresh;
  conn.fresh = false;
  for (const r of renderers) {
    if (firstOnly && !r.first) continue;
    try { timed(r.name, function () { r.render(model, firstOnly); }); } catch (e) {
      console.warn("renderer failed", e);
    }
  }
  renderHeader();
  if (firstOnly) schedule();
}
export { schedule };

function text(id, value) {
  const el = document.getElementById(id);
  if (el && el.textContent !== String(value)) el.textContent = value;
}
/** Says when the live view holds only part of the session (a compact snapshot after
 * this viewer fell behind, or rows past the server's bound): the rest is paged from
 * the recording (request_pages.js). */
function renderLeftOut() {
  const el = document.getElementById("left-out");
  if (!el) return;
  const lo = !mode.replay && model.leftOut;
  let words = "";
  if (lo) {
    words = "showing the last " + (model.step - lo.from_step + 1) + " steps live (from step " +
      lo.from_step + "); " + (lo.requests ? lo.requests + " earlier requests, with their older steps, " +
      "paged from the recording (table and timeline)" : "older steps paged from the recording (replay)");
  }
  if (el.textContent !== words) el.textContent = words;
  el.hidden = !lo;
}
function renderHeader() {
  text("hdr-session", model.session || "–");
  text("hdr-name", model.meta.name || "");
  text("hdr-step", model.step);
  text("hdr-running", model.queues.running);
  text("hdr-waiting", model.queues.waiting);
  text("hdr-requests", model.numRequests());
  renderLeftOut();
  const run = document.getElementById("run-state");
  if (run) {
    const f = model.meta.failure;
    const s = f ? "stopped" : model.paused ? "paused" : "running";
    if (run.dataset.state !== s) { run.dataset.state = s; run.textContent = s; }
    // Stopped where vLLM's engine would: which assertion, at which step.
    const why = f ? "stopped at step " + f.step + " as vLLM's engine would: its scheduler " +
      "fails `assert " + f.assertion + "` (" + f.detail + ")" : "";
    if (run.title !== why) run.title = why;
  }
  const sim = document.getElementById("sim-badge");
  if (sim) sim.hidden = !model.simulated;
  const demo = document.getElementById("demo-caption");
  if (demo) demo.hidden = model.meta.workload !== "demo";
}

// The socket opens now, while the page's other scripts still load: the server builds
// the snapshot meanwhile. Nothing is folded or drawn before the renderers' init.
let ready = false;
/** Open (or adopt) the socket and, once the page is parsed, init the registered renderers
 * and fold what came meanwhile. The page's entry module calls it after registering them. */
export function start() {
  connect();
  document.addEventListener("DOMContentLoaded", function () {
    for (const r of renderers) if (r.init) r.init(model);
    ready = true;
    for (const m of early.splice(0)) receive(m[0], m[1]);
    schedule();
  });
}
