/* keys.js: the page's keyboard. Space pauses / plays (live: the engine, with the control
 * token; replay: the recording), ←/→ step in replay, `/` focuses the request search, Esc
 * closes the request panel (or leaves a field). Keys typed into a field are the field's;
 * the timeline handles its own keys when it has the focus (gantt.js). */
import { api, flash } from "./common.js";
import { controlPath } from "./controls.js";
import { selection, unselect } from "./forensics.js";
import { mode, pageModel } from "./live.js";
import { replay } from "./replay.js";

function typing(t) {
  if (!t || !t.tagName) return false;
  return t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName);
}

async function togglePause() {
  if (mode.replay) { replay.toggle(); return; }
  const path = pageModel.paused ? "/api/resume" : "/api/pause";
  try {
    await api("POST", controlPath(path));
    flash(true, pageModel.paused ? "resumed" : "paused");
  } catch (e) { flash(false, e.message); }
}

document.addEventListener("keydown", function (ev) {
  if (ev.defaultPrevented || ev.ctrlKey || ev.metaKey || ev.altKey) return;
  if (ev.key === "Escape") {
    if (typing(ev.target)) { ev.target.blur(); return; }
    if (selection) { unselect(); ev.preventDefault(); }
    return;
  }
  if (typing(ev.target)) return;
  if (ev.key === "/") {
    const search = document.getElementById("req-search");
    if (search) { search.focus(); search.select(); ev.preventDefault(); }
  } else if (ev.key === " " || ev.code === "Space") {
    // A focused button would also "click" on space: the shortcut wins, once.
    togglePause();
    ev.preventDefault();
  } else if ((ev.key === "ArrowLeft" || ev.key === "ArrowRight") && mode.replay) {
    replay.stepBy(ev.key === "ArrowLeft" ? -1 : 1);
    ev.preventDefault();
  }
});
