"""The sender thread over a websocket: frames out to a dashboard's /ws/ingest
(docs/protocol.md).

The intake, the frame building and the session's end are sender_core.SenderCore's; this
transport streams the producer core's history over a synchronous websocket: announce ->
welcome(last_seq) -> JSON arrays of envelopes, resending everything after `last_seq` on
every (re)connect. While the dashboard is away the thread keeps building into the history.
Control is refused. Every stats message carries `observer_errors` and `degraded`.
"""

from __future__ import annotations

import json
import logging
import time

from websockets.exceptions import WebSocketException
from websockets.sync.client import ClientConnection, connect

from batchscope_vllm.sender_core import REFUSAL, SEND_INTERVAL_S, SenderCore
from protocol import control
from protocol.codes import MessageType

__all__ = ["REFUSAL", "SEND_INTERVAL_S", "Sender"]

log = logging.getLogger("batchscope_vllm")

STATS_INTERVAL_S = 1.0
MAX_MESSAGE_CHARS = 512 * 1024


class Sender(SenderCore):
    """The sender thread, streaming to a dashboard's /ws/ingest."""

    def _loop(self) -> None:
        backoff = 0.2
        while not self._done():
            try:
                self._stream()
                backoff = 0.2
            except (OSError, WebSocketException, TimeoutError, ValueError) as exc:
                self._problem(f"dashboard unreachable ({type(exc).__name__}: {exc})")
            until = time.monotonic() + backoff
            while time.monotonic() < until and not self._done():
                self._pump(SEND_INTERVAL_S)
            backoff = min(backoff * 2, 5.0)

    def _stream(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        with connect(
            self.url, additional_headers=headers, open_timeout=5, close_timeout=2, max_size=None
        ) as ws:
            ws.send(json.dumps(self.frames.hello(self.announce)))
            # Resends what the dashboard lacks of the history from the next flush on.
            self.frames.welcome(json.loads(ws.recv(timeout=10)))
            self._last_problem = ""
            log.info("batchscope: streaming session %s to %s", self.session, self.url)
            last_stats = 0.0
            while not self._done():
                self._pump(SEND_INTERVAL_S)
                self._flush(ws)
                self._poll(ws)
                now = time.monotonic()
                if now - last_stats >= STATS_INTERVAL_S:
                    self._stats(ws)
                    last_stats = now
            self._flush(ws)
            self._stats(ws)

    def _stats(self, ws: ClientConnection) -> None:
        stats = {**self.frames.stats(), "dropped": self.dropped}
        stats.update(observer_errors=self.observer_errors, degraded=dict(self.degraded))
        ws.send(json.dumps(stats))

    def _flush(self, ws: ClientConnection) -> None:
        """Send what the history holds unsent as JSON arrays of at most ~MAX_MESSAGE_CHARS."""
        frames = self.frames
        while batch := frames.pending(MAX_MESSAGE_CHARS):
            ws.send("[" + ",".join(text for _, text in batch) + "]")
            frames.mark_sent(batch[-1][0])
        frames.mark_sent(frames.seq)  # includes the holes left for dropped items
        if self._ended:
            self._flushed.set()

    def _poll(self, ws: ClientConnection) -> None:
        """Answer what the dashboard sent: commands are refused, errors are logged."""
        while True:
            try:
                text = ws.recv(timeout=0)
            except TimeoutError:
                return
            try:
                msg = json.loads(text)
            except ValueError:
                continue
            if not isinstance(msg, dict):
                continue
            if msg.get("type") == MessageType.COMMAND:
                ws.send(json.dumps(control.reply_error(msg.get("id"), REFUSAL)))
            elif msg.get("type") == MessageType.ERROR:
                self.errors += 1
                log.warning("batchscope: the dashboard says: %s", msg.get("detail"))
