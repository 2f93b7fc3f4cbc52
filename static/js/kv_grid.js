/* kv_grid.js: the KV block map on a <canvas>. One cell per usable block, coloured by state
 * (free / cached / used / shared / withheld) or by owner (a hue per request); shared
 * blocks are outlined. Only changed cells are repainted; hover shows block, owner, ref_cnt. */
(function () {
  "use strict";
  const BS = (window.BS = window.BS || {});
  const GAP = 1;
  const st = { canvas: null, ctx: null, cell: 12, cols: 1, total: 0, epoch: -1,
    mode: "state", width: 0, wrapWidth: 0, colours: {} };
  BS.kvGrid = st;

  function hue(owner) {
    let h = 0;
    for (let i = 0; i < owner.length; i++) h = (h * 31 + owner.charCodeAt(i)) >>> 0;
    return (h * 137.508) % 360;
  }

  function loadColours() {
    for (const k of ["free", "cached", "used", "shared", "withheld", "outline"]) {
      st.colours[k] = BS.cssVar("--kv-" + k);
    }
  }

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
    if (!b) return st.colours.free;
    const state = b[0];
    if (st.mode === "owner" && b[1] && (state === "used" || state === "shared")) {
      return "hsl(" + hue(b[1]).toFixed(0) + ", 62%, 52%)";
    }
    return st.colours[state] || st.colours.free;
  }

  function paint(model, id) {
    const i = id - 1; // block 0 is the null block; ids start at 1
    if (i < 0 || i >= st.total) return;
    const x = (i % st.cols) * st.cell;
    const y = Math.floor(i / st.cols) * st.cell;
    const b = model.blocks[id];
    const ctx = st.ctx;
    const s = st.cell - GAP;
    ctx.clearRect(x, y, st.cell, st.cell);
    ctx.fillStyle = fill(b);
    ctx.fillRect(x, y, s, s);
    if (b && b[0] === "shared" && s >= 5) {
      ctx.strokeStyle = st.colours.outline;
      ctx.lineWidth = 1.5;
      ctx.strokeRect(x + 0.75, y + 0.75, s - 1.5, s - 1.5);
    }
  }

  function summary(model) {
    const el = document.getElementById("kv-summary");
    if (!el) return;
    const n = { used: 0, shared: 0, cached: 0, free: 0, withheld: 0 };
    for (let id = 1; id <= st.total; id++) {
      const b = model.blocks[id];
      n[b ? b[0] : "free"] = (n[b ? b[0] : "free"] || 0) + 1;
    }
    el.textContent = st.total + " blocks · used " + (n.used + n.shared) + " (shared " + n.shared +
      ") · cached " + n.cached + " · free " + n.free + (n.withheld ? " · withheld " + n.withheld : "");
  }

  function redrawAll(model) {
    layoutGrid(model);
    for (let id = 1; id <= st.total; id++) paint(model, id);
    model.blockDirty.clear();
    model.blocksAll = false;
    st.epoch = model.epoch;
  }

  function render(model) {
    if (!st.canvas) return;
    if (model.blocksAll || st.epoch !== model.epoch || model.kvTotal !== st.total ||
        Math.abs(st.wrapWidth - st.width) > 2) {
      redrawAll(model);
    } else if (model.blockDirty.size) {
      for (const id of model.blockDirty) paint(model, id);
      model.blockDirty.clear();
    } else {
      return;
    }
    summary(model);
  }

  function onHover(ev) {
    const rect = st.canvas.getBoundingClientRect();
    const col = Math.floor((ev.clientX - rect.left) / st.cell);
    const row = Math.floor((ev.clientY - rect.top) / st.cell);
    const id = row * st.cols + col + 1;
    if (col >= st.cols || id < 1 || id > st.total) { st.canvas.title = ""; return; }
    const b = BS.model.blocks[id] || ["free", null, 0];
    const held = b[0] === "used" || b[0] === "shared";
    const who = b[1] ? (held ? " · owner " : " · last owner ") + b[1] : "";
    const text = "block " + id + " · " + b[0] + who + " · ref_cnt " + b[2];
    st.canvas.title = text; // title is plain text: no markup is ever interpreted
    const info = document.getElementById("kv-hover");
    if (info) info.textContent = text;
  }

  function init(model) {
    st.canvas = document.getElementById("kv-grid");
    if (!st.canvas) return;
    st.ctx = st.canvas.getContext("2d");
    loadColours();
    st.canvas.addEventListener("mousemove", onHover);
    const sel = document.getElementById("kv-colour");
    if (sel) sel.addEventListener("change", function () {
      st.mode = sel.value; redrawAll(BS.model);
    });
    // Track the width with a ResizeObserver: reading clientWidth in render() would force
    // a synchronous layout of the whole page on every frame.
    st.wrapWidth = st.canvas.parentElement.clientWidth;
    new ResizeObserver(function (entries) {
      st.wrapWidth = entries[entries.length - 1].contentRect.width;
      BS.schedule();
    }).observe(st.canvas.parentElement);
    redrawAll(model);
  }

  BS.register({ name: "kv", init: init, render: render });
})();
