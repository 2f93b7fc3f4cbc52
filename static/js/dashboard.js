/* dashboard.js: the dashboard page's entry module (live, followed or replayed). It
 * registers the renderers live.js draws, in the order they init and draw, wires the
 * page's keys, controls and release-pair buttons (modules that only listen), opens the
 * socket, and hangs one deliberately named handle on window (batchscope) for the
 * browser tests and tools/ui_bench.py: nothing in the page reads it. */
import { waitingText } from "./waiting.js";
import { renderer as charts } from "./charts.js";
import "./controls.js";
import { filters, renderer as filtersRenderer } from "./filters.js";
import { renderer as forensics, select } from "./forensics.js";
import "./keys.js";
import { kvGrid, renderer as kv } from "./kv_grid.js";
import { conn, mode, pageModel, register, schedule, start } from "./live.js";
import { renderer as modes } from "./modes.js";
import "./release_pair.js";
import { replay, renderer as replayRenderer } from "./replay.js";
import { countRenderer, requestPages } from "./request_pages.js";
import { renderer as table } from "./request_table.js";
import { renderer as steps } from "./steps_table.js";
import { perf } from "./throttle.js";
import { timeline, renderer as gantt } from "./timeline.js";

for (const r of [filtersRenderer, countRenderer, gantt, table, forensics, modes, kv, steps]) {
  register(r);
}
if (mode.replay) register(replayRenderer);
register(charts);
start();

/** For tests and tools only (browser tests, tools/ui_bench.py): the model, the socket's
 * counters and the panels' state to inspect; select() to select a request as a click
 * would, schedule() to ask for a frame (the bench folds its own frames). The page itself
 * never reads it. */
window.batchscope = Object.freeze({
  model: pageModel, conn: conn, perf: perf, timeline: timeline, kvGrid: kvGrid,
  replay: replay, requestPages: requestPages, filters: filters, waitingText: waitingText,
  select: select, schedule: schedule,
});
