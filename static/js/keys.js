/* keys.js: the page's keyboard. Space pauses / plays (live: the engine, with the control
 * token; replay: the recording), ←/→ step in replay, `/` focuses the request search, Esc
 * closes the request panel (or leaves a field). Keys typed into a field are the field's;
 * the timeline handles its own keys when it has the focus (gantt.js). */
(function () {
  "use strict";
  const BS = (window.BS = window.BS || {});

  function typing(t) {
    if (!t || !t.tagName) return false;
    return t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName);
  }

  async function togglePause() {
    if (BS.mode.replay) { if (BS.replay) BS.replay.toggle(); return; }
    const path = BS.model.paused ? "/api/resume" : "/api/pause";
    try {
      await BS.api("POST", BS.controlPath(path));
      BS.flash(true, BS.model.paused ? "resumed" : "paused");
    } catch (e) { BS.flash(false, e.message); }
  }

  document.addEventListener("keydown", function (ev) {
    if (ev.defaultPrevented || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (ev.key === "Escape") {
      if (typing(ev.target)) { ev.target.blur(); return; }
      if (BS.selection && BS.unselect) { BS.unselect(); ev.preventDefault(); }
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
    } else if ((ev.key === "ArrowLeft" || ev.key === "ArrowRight") && BS.mode.replay && BS.replay) {
      BS.replay.stepBy(ev.key === "ArrowLeft" ? -1 : 1);
      ev.preventDefault();
    }
  });
})();
