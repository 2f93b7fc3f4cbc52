/* socket.js: opens the dashboard's /ws/live socket, its hello in the URL, as soon as the
 * page starts to load: an async module at the top of <head>, before the stylesheet, so
 * the snapshot (2 MB for 10,000 requests) travels while the page parses, lays out and
 * runs its other modules. live.js adopts the socket and the messages that came before it
 * was ready (takeEarlySocket). A replay page opens its socket in live.js: its hello
 * depends on the step on screen. */
import { MESSAGE } from "./protocol.js";

/** A /ws/live socket; `hello` (optional) travels in its URL, so the server answers as
 * soon as it accepts, not once the page's busy main thread has seen the socket open. */
export function openSocket(hello) {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const query = hello ? "?hello=" + encodeURIComponent(JSON.stringify(hello)) : "";
  return new WebSocket(proto + "//" + location.host + "/ws/live" + query);
}

/** The hello of a live page (docs/protocol.md), following `session` (null: whichever is
 * live). acks: answer the server's pings, so it can tell when this tab falls behind;
 * rows: request rows as columns in snapshots (smaller, faster on big sessions). */
export function liveHello(session) {
  return { type: MESSAGE.HELLO, session: session, last_seq: null, acks: true, rows: "columns" };
}

/** The socket opened while the page loaded, with the messages it got meanwhile
 * ({ws, messages, openAt}), once; null after that, and on a replay page. */
export function takeEarlySocket() {
  const pre = early;
  early = null;
  return pre;
}

// The page's URL says what it shows (app/routes/dashboard.py): `?session=ID` a replay
// (live.js opens its socket), `?live=ID` one live session, else whichever is live.
function openEarly() {
  const query = new URLSearchParams(location.search);
  if (query.get("session")) return null;
  const ws = openSocket(liveHello(query.get("live") || null));
  const pre = { ws: ws, messages: [], openAt: null };
  ws.onopen = function () { pre.openAt = performance.now(); };
  ws.onmessage = function (ev) { pre.messages.push([ev.data, performance.now()]); };
  return pre;
}
let early = openEarly();
