/* kv_grid.js: the KV block map on a <canvas>. One cell per usable block, coloured by state
 * (free / cached / used / shared / withheld) or by owner (a hue per request); shared
 * blocks are outlined. Only changed cells are repainted; hover shows block, owner, ref_cnt;
 * clicking a held block selects its owner. The selected request's blocks (at the step
 * shown) are outlined and the rest dimmed. History: live, the slider scrubs back through
 * the recording (GET /api/sessions/{id}/blocks?step=N); in replay the scrubber does. */
import { BLOCK, BLOCK_LIST, HELD_BLOCK_STATES } from "./protocol.js";
import { api, cssVar, flash } from "./common.js";
import { select, selectedBlocks, selection } from "./forensics.js";
import { mode, pageModel, schedule } from "./live.js";
const HELD = HELD_BLOCK_STATES;
const GAP = 1;
const FETCH_MS = 120;
const st = { canvas: null, ctx: null, cell: 12, cols: 1, total: 0, epoch: -1,
  mode: "state", width: 0, wrapWidth: 0, colours: {}, hist: null, selKey: "", sel: null,
  timer: null, seq: 0 };
export { st as kvGrid };

function hue(owner) {
  let h = 0;
  for (let i = 0; i < owner.length; i++) h = (h * 31 + owner.charCodeAt(i)) >>> 0;
  return (h * 137.508) % 360;
}

function loadColours() {
  for (const k of BLOCK_LIST.concat(["outline"])) {
    st.colours[k] = cssVar("--kv-" + k);
  }
  st.colours.selected = cssVar("--c-selected");
}

/** The map on screen: a recorded step's (history) or the model's. */
function blocks(model) { return st.hist ? st.hist.map : model.blocks; }
function shownStep(model) { return st.hist ? st.hist.step : model.step; }

function layoutGrid(model) {
  const width = Math.max(120, st.wrapWidth);
  const total = Math.max(model.kvTotal, 1);
  // The largest cell (4..14 px) that fits the blocks into ~220 px of height.
  let cell = 14;
  while (cell > 4 && Math.ceil(total / Math.floor(width / cell)) * cell > 220) cell--;
  st.cell = cell;
  st.cols = Math.max(1, Math.floor(width / cell));
  st.total = total;
  st.width = width;
  const rows = Math.ceil(total / st.cols);
  const dpr = window.devicePixelRatio || 1;
  st.canvas.width = Math.round(st.cols * cell * dpr);
  st.canvas.height = Math.round(rows * cell * dpr);
  st.canvas.style.width = st.cols * cell + "px";
  st.canvas.style.height = rows * cell + "px";
  st.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
}

function fill(b) {
  if (!b) return st.colours[BLOCK.FREE];
  const state = b[0];
  if (st.mode === "owner" && b[1] && HELD.includes(state)) {
    return "hsl(" + hue(b[1]).toFixed(0) + ", 62%, 52%)";
  }
  return st.colours[state] || st.colours[BLOCK.FREE];
}

function paint(model, id) {
  const i = id - 1; // block 0 is the null block; ids start at 1
  if (i < 0 || i >= st.total) return;
  const x = (i % st.cols) * st.cell;
  const y = Math.floor(i / st.cols) * st.cell;
  const b = blocks(model)[id];
  const ctx = st.ctx;
  const s = st.cell - GAP;
  const mine = st.sel && st.sel.has(id);
  ctx.clearRect(x, y, st.cell, st.cell);
  ctx.globalAlpha = st.sel && !mine ? 0.3 : 1;
  ctx.fillStyle = fill(b);
  ctx.fillRect(x, y, s, s);
  ctx.globalAlpha = 1;
  if (mine) {
    ctx.strokeStyle = st.colours.selected;
    ctx.lineWidth = 2;
    ctx.strokeRect(x + 1, y + 1, s - 2, s - 2);
  } else if (b && b[0] === BLOCK.SHARED && s >= 5) {
    ctx.strokeStyle = st.colours.outline;
    ctx.lineWidth = 1.5;
    ctx.strokeRect(x + 0.75, y + 0.75, s - 1.5, s - 1.5);
  }
}

function summary(model) {
  const el = document.getElementById("kv-summary");
  if (!el) return;
  const n = {};
  for (const k of BLOCK_LIST) n[k] = 0;
  const map = blocks(model);
  for (let id = 1; id <= st.total; id++) {
    const b = map[id];
    n[b ? b[0] : BLOCK.FREE] = (n[b ? b[0] : BLOCK.FREE] || 0) + 1;
  }
  const at = st.hist ? "step " + st.hist.step + " · " : "";
  const sel = st.sel ? " · " + selection.req + " holds " + st.sel.size : "";
  el.textContent = at + st.total + " blocks · used " + (n[BLOCK.USED] + n[BLOCK.SHARED]) +
    " (shared " + n[BLOCK.SHARED] + ") · cached " + n[BLOCK.CACHED] + " · free " +
    n[BLOCK.FREE] + (n[BLOCK.WITHHELD] ? " · withheld " + n[BLOCK.WITHHELD] : "") + sel;
}

function redrawAll(model) {
  layoutGrid(model);
  for (let id = 1; id <= st.total; id++) paint(model, id);
  model.blockDirty.clear();
  model.blocksAll = false;
  st.epoch = model.epoch;
}

// The step whose holdings are outlined: the history step, else the end of the life read
// (live: "now" as of the last refresh), so a live selection is not repainted every frame.
function selectionStep(model) {
  const life = selection && selection.life;
  if (!life) return null;
  return st.hist ? st.hist.step : Math.min(shownStep(model), life.upto_step);
}
function selectionKey(model) {
  const at = selectionStep(model);
  return at === null ? "" : selection.req + ":" + selection.life.upto_step + ":" + at;
}

function render(model) {
  if (!st.canvas) return;
  syncSlider(model);
  const sk = selectionKey(model);
  const selChanged = sk !== st.selKey;
  if (selChanged) {
    st.selKey = sk;
    st.sel = sk ? selectedBlocks(selectionStep(model)) : null;
  }
  if (selChanged || model.blocksAll || st.epoch !== model.epoch || model.kvTotal !== st.total ||
      Math.abs(st.wrapWidth - st.width) > 2) {
    redrawAll(model);
  } else if (model.blockDirty.size) {
    if (!st.hist) for (const id of model.blockDirty) paint(model, id);
    model.blockDirty.clear();
  } else {
    return;
  }
  summary(model);
}

function blockAt(ev) {
  const rect = st.canvas.getBoundingClientRect();
  const col = Math.floor((ev.clientX - rect.left) / st.cell);
  const row = Math.floor((ev.clientY - rect.top) / st.cell);
  const id = row * st.cols + col + 1;
  return col >= st.cols || id < 1 || id > st.total ? null : id;
}

function onHover(ev) {
  const id = blockAt(ev);
  if (id === null) { st.canvas.title = ""; return; }
  const b = blocks(pageModel)[id] || [BLOCK.FREE, null, 0];
  const held = HELD.includes(b[0]);
  const who = b[1] ? (held ? " · owner " : " · last owner ") + b[1] : "";
  const text = "block " + id + " · " + b[0] + who + " · ref_cnt " + b[2] +
    (held && b[1] ? " · click: " + b[1] + "'s life" : "");
  st.canvas.title = text; // title is plain text: no markup is ever interpreted
  const info = document.getElementById("kv-hover");
  if (info) info.textContent = text;
}

function onClick(ev) {
  const id = blockAt(ev);
  const b = id === null ? null : blocks(pageModel)[id];
  if (b && b[1] && HELD.includes(b[0])) {
    select(b[1], { step: st.hist ? st.hist.step : undefined });
  }
}

// ------------------------------------------------------------------ history (live)
function syncSlider(model) {
  const s = document.getElementById("kv-scrub");
  if (!s || mode.replay) return;
  const max = String(Math.max(model.step, 0));
  if (s.max !== max) s.max = max;
  if (!st.hist && document.activeElement !== s) s.value = max;
  const label = document.getElementById("kv-step");
  const text = st.hist ? "step " + st.hist.step : "live";
  if (label && label.textContent !== text) label.textContent = text;
  const live = document.getElementById("kv-live");
  if (live) live.disabled = !st.hist;
}

function toLive() {
  st.hist = null;
  st.seq++;
  st.selKey = "-";
  pageModel.blocksAll = true;
  schedule();
}

async function fetchStep(step) {
  const seq = ++st.seq;
  const sid = pageModel.session;
  if (!sid) return;
  try {
    const out = await api("GET", "/api/sessions/" + encodeURIComponent(sid) + "/blocks?step=" + step);
    if (seq !== st.seq) return;
    const map = [];
    for (const b of out.blocks) map[b[0]] = [b[1], b[2], b[3]];
    st.hist = { step: out.step, map: map };
    st.selKey = "-";
    pageModel.blocksAll = true;
    schedule();
  } catch (e) {
    if (seq === st.seq) flash(false, "block map at step " + step + ": " + e.message);
  }
}

function init(model) {
  st.canvas = document.getElementById("kv-grid");
  if (!st.canvas) return;
  st.ctx = st.canvas.getContext("2d");
  loadColours();
  st.canvas.addEventListener("mousemove", onHover);
  st.canvas.addEventListener("click", onClick);
  const sel = document.getElementById("kv-colour");
  if (sel) sel.addEventListener("change", function () {
    st.mode = sel.value; redrawAll(pageModel);
  });
  const scrub = document.getElementById("kv-scrub");
  if (scrub) {
    scrub.addEventListener("input", function () {
      clearTimeout(st.timer);
      const step = parseInt(scrub.value, 10);
      if (step >= pageModel.step) { toLive(); return; }
      st.timer = setTimeout(function () { fetchStep(step); }, FETCH_MS);
    });
    document.getElementById("kv-live").addEventListener("click", toLive);
    document.body.addEventListener("bs:session", toLive);
  }
  // Track the width with a ResizeObserver: reading clientWidth in render() would force
  // a synchronous layout of the whole page on every frame.
  st.wrapWidth = st.canvas.parentElement.clientWidth;
  new ResizeObserver(function (entries) {
    st.wrapWidth = entries[entries.length - 1].contentRect.width;
    schedule();
  }).observe(st.canvas.parentElement);
  redrawAll(model);
}

/** Drawn by live.js (registered by dashboard.js). */
export const renderer = { name: "kv", init: init, render: render };
