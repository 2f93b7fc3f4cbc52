/* socket.js: opens the dashboard's /ws/live socket, its hello in the URL, as soon as the
 * page starts to load: a small classic script at the top of <head>, before the stylesheet
 * (a script after one waits for it), so the snapshot (2 MB for 10,000 requests) travels
 * while the page parses, lays out and runs its deferred scripts. live.js adopts the socket
 * and the messages that came before it was ready (BS.earlySocket). A replay page opens its
 * socket in live.js: its hello depends on the step on screen. */
(function () {
  "use strict";
  const BS = (window.BS = window.BS || {});
  // The hello's type (protocol.codes.MessageType.HELLO): this script runs before the
  // deferred protocol.js, so the page hands it over in the script's data-hello.
  const HELLO = document.currentScript.dataset.hello;

  /** A /ws/live socket; `hello` (optional) travels in its URL, so the server answers as
   * soon as it accepts, not once the page's busy main thread has seen the socket open. */
  BS.openSocket = function (hello) {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const query = hello ? "?hello=" + encodeURIComponent(JSON.stringify(hello)) : "";
    return new WebSocket(proto + "//" + location.host + "/ws/live" + query);
  };

  /** The hello of a live page (docs/protocol.md), following `session` (null: whichever is
   * live). acks: answer the server's pings, so it can tell when this tab falls behind;
   * rows: request rows as columns in snapshots (smaller, faster on big sessions). */
  BS.liveHello = function (session) {
    return { type: HELLO, session: session, last_seq: null, acks: true, rows: "columns" };
  };

  // The page's URL says what it shows (app/routes/dashboard.py): `?session=ID` a replay
  // (live.js opens its socket), `?live=ID` one live session, else whichever is live.
  const query = new URLSearchParams(location.search);
  if (query.get("session")) return;
  const ws = BS.openSocket(BS.liveHello(query.get("live") || null));
  const pre = (BS.earlySocket = { ws: ws, messages: [], openAt: null });
  ws.onopen = function () { pre.openAt = performance.now(); };
  ws.onmessage = function (ev) { pre.messages.push([ev.data, performance.now()]); };
})();
