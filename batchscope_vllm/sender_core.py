"""The sender thread, whatever its transport: the intake, the frames, the session's end.

The engine thread only appends to the intake (a deque: no lock, no wake-up, ~0.1 µs); this
thread sleeps SEND_INTERVAL_S (a Wakeup: close() and a stop cut it short), builds everything
queued meanwhile (frames.py) and hands the frames to the producer core (protocol.producer:
numbering, encoding, a history bounded in bytes, the handshake). So it takes the GIL a few
times a second in short bursts, not once per hook. What falls out of the history unsent,
and what the full queue refused, is counted as dropped (a queue drop also skips a seq: the
dashboard shows a gap). `request_stop()` is safe in a signal handler (a flag and a wake-up,
no lock): the closing frame follows what was queued before it. The transport's subclass
(sender.Sender: a websocket; bus.BusSender: a NATS bus) supplies `_loop`, which ships the
history until `_done()`.

The session ends with a `session` frame `{"event": "closed", "reason": ...}`: `shutdown`
(close(), request_stop()), after an `aborted` mark for each request still in flight (vLLM
aborts them at a stop), or `observer_error` when observing failed (fail(), or here; the
node serves on, its requests too). That frame carries `observer_errors` (the first one
stops it) and `degraded` (the observations skipped for a missing vLLM attribute, counted).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from batchscope_vllm.frames import FrameBuilder, encode_data
from batchscope_vllm.steps import Hooked
from batchscope_vllm.waiting import Limits
from batchscope_vllm.wakeup import Wakeup
from protocol.codes import FrameType, SessionEvent
from protocol.producer import ProducerCore
from protocol.session import new_session_id, node_opened

log = logging.getLogger("batchscope_vllm")

SEND_INTERVAL_S = 0.05
QUIET_FLUSH_S = 1.0
"""Async scheduling: a step that only scheduled is emitted once no hook came for this
long (the next hook would have completed or closed it)."""
MAX_ITEMS_PER_PUMP = 4096
REFUSAL = "control is not supported for vLLM nodes"
"""What every transport answers a dashboard's command."""


class SenderCore:
    """The sender thread, all but its transport (`_loop`, a subclass's)."""

    def __init__(
        self,
        url: str,
        token: str,
        node: str,
        announce: dict[str, Any],
        max_tokens: int,
        max_seqs: int,
        total_blocks: int,
        queue_size: int = 65_536,
        history_bytes: int = 64 << 20,
        limits: Limits | None = None,
    ) -> None:
        self.url, self.token, self.node = url, token, node
        self.announce = announce
        degraded = announce.get("degraded")
        self.degraded: dict[str, int] = degraded if isinstance(degraded, dict) else {}
        """Observations skipped so far (compat.Degraded, counted by the hooks)."""
        self.frames = ProducerCore(new_session_id(), node, max_chars=history_bytes)
        """The session's seq, its history (bounded in bytes), what left it unsent, and the
        handshake; this thread's alone."""
        self.queue: deque[Hooked] = deque()
        """The intake: the engine thread appends (offer), this thread pops."""
        self.queue_size = queue_size
        self.dropped_in_queue = 0  # incremented by the engine thread only
        config = announce.get("config") or {}
        self.builder = FrameBuilder(
            max_tokens, max_seqs, total_blocks, bool(config.get("async_scheduling")), limits
        )
        self._last_item = time.monotonic()
        self.errors = 0
        self.observer_errors = 0
        self.failed: str | None = None  # where observing failed: the session is closed
        self.on_failure: Any = None  # called when the sender thread fails: the hooks stop
        self._ended = False
        self._seen_drops = 0
        self._closing = threading.Event()
        self._wakeup = Wakeup()
        """Cuts this thread's wait short (close, fail, request_stop)."""
        self._stop_requested = 0.0
        """Set by request_stop(): the close's timeout in s (0: none requested)."""
        self._stop_t = 0.0
        """When the node was told to stop (request_stop, close: a perf_counter time)."""
        self._flushed = threading.Event()
        """Set once the closing frame went out on the socket."""
        self._deadline = float("inf")
        self._last_problem = ""
        self._thread = threading.Thread(target=self._run, name="batchscope-sender", daemon=True)
        self._add(FrameType.SESSION, node_opened(node, announce))

    # ------------------------------------------------------------ intake (engine thread)
    def offer(self, item: Hooked) -> None:
        """Queue one hook's item for this thread; never blocks (a full intake counts a
        drop). Called by the engine thread only."""
        if len(self.queue) >= self.queue_size:
            self.dropped_in_queue += 1
        else:
            self.queue.append(item)

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float = 5.0) -> bool:
        """End the session: deliver what is queued and the closing frame (up to `timeout`
        s), close the socket, stop the thread. True when every frame produced reached the
        socket."""
        self._stop_t = self._stop_t or time.perf_counter()
        self._begin_close(timeout)
        self._wakeup.wake()
        if self._thread.is_alive():
            self._thread.join(timeout + 2.0)
        return self.delivered()

    def request_stop(self, timeout: float = 2.0) -> None:
        """Like close(timeout), without waiting, and safe in a signal handler (no lock is
        taken here: this thread sees the request at its next wake-up, within
        SEND_INTERVAL_S, and ends the session)."""
        if not self._stop_requested:
            self._stop_t = self._stop_t or time.perf_counter()
            self._stop_requested = timeout
            self._wakeup.wake()

    def wait_flushed(self, timeout: float) -> bool:
        """Wait up to `timeout` s for the closing frame to be on the socket."""
        return self._flushed.wait(timeout)

    def _begin_close(self, timeout: float) -> None:
        if not self._closing.is_set():
            self._deadline = time.monotonic() + timeout
            self._closing.set()

    def fail(self, where: str) -> None:
        """Observing failed in `where` (the engine thread's hooks): count it, close the
        session and stop, without waiting (the engine thread goes on at once)."""
        if self.failed is None:  # the first failure stops observing: later ones are its tail
            self.failed = where
            self.observer_errors += 1
        self._begin_close(5.0)
        self._wakeup.wake()

    def delivered(self) -> bool:
        return not self.queue and self._ended and self.frames.sent >= self.frames.seq

    @property
    def session(self) -> str:
        return self.frames.session

    @property
    def seq(self) -> int:
        """The newest seq of the session (holes included)."""
        return self.frames.seq

    @property
    def connects(self) -> int:
        return self.frames.connects

    @property
    def dropped(self) -> int:
        """Items the full intake refused (counted at once, by the engine thread) and frames
        that left the history unsent."""
        return self.dropped_in_queue + self.frames.lost_in_history

    def _done(self) -> bool:
        if self._stop_requested and not self._closing.is_set():
            self._begin_close(self._stop_requested)
        if not self._closing.is_set():
            return False
        return time.monotonic() >= self._deadline or self.delivered()

    def _end(self) -> None:  # the closing frame, once everything before it was built
        if self._ended:
            return
        if self.failed is None:
            # A clean stop: what vLLM aborts, recorded as aborted (FrameBuilder.stop).
            self._build(self.builder.stop, self._stop_t or time.perf_counter())
        self._ended = True
        reason = "observer_error" if self.failed is not None else "shutdown"
        data: dict[str, Any] = {"event": SessionEvent.CLOSED, "reason": reason}
        data["observer_errors"] = self.observer_errors
        data["degraded"] = dict(self.degraded)
        if self.failed is not None:
            data["detail"] = f"observing failed in {self.failed}; the node serves on unobserved"
        self._add(FrameType.SESSION, data)

    # ------------------------------------------------------------ frames
    def _add(self, frame_type: str, data: Mapping[str, Any]) -> None:
        self.frames.add(frame_type, encode_data(data), time.time())

    def _pump(self, wait: float) -> None:
        """Build frames from the queued items (at most MAX_ITEMS_PER_PUMP), first waiting
        `wait` s unless items are left over from the last batch or a close is asking."""
        if wait > 0 and len(self.queue) < MAX_ITEMS_PER_PUMP and not self._closing.is_set():
            self._wakeup.sleep(wait)
        if self.failed is not None or self._ended:
            self._discard()  # (after the closing frame: what the hooks still queued)
            return
        items = self.queue
        if not items:
            quiet = time.monotonic() - self._last_item
            if quiet > QUIET_FLUSH_S or self._closing.is_set():
                # Async scheduling: a step that only scheduled is complete by now.
                self._build(self.builder.flush)
            if self._closing.is_set() and self.failed is None:
                self._end()
            return
        self._last_item = time.monotonic()
        build = self.builder.build
        for _ in range(MAX_ITEMS_PER_PUMP):
            try:
                item = items.popleft()
            except IndexError:
                return
            drops = self.dropped_in_queue
            if drops != self._seen_drops:
                # A hole: the dashboard records a visible gap here.
                self.frames.hole(drops - self._seen_drops)
                self._seen_drops = drops
            self._build(build, item)
            if self.failed is not None:
                self._discard()
                return

    def _build(self, make: Any, *args: Any) -> None:
        try:
            frames = make(*args)
        except Exception:  # a bug here stops observing, never the node
            first = self._failed_here("frames", "could not build frames")
            if first and self.on_failure is not None:
                self.on_failure()
            return
        for frame_type, data in frames:
            self._add(frame_type, data)

    def _discard(self) -> None:
        """After a failure: drop what the hooks queued meanwhile, then end the session."""
        self.queue.clear()
        self._end()

    # ------------------------------------------------------------ thread
    def _run(self) -> None:
        try:
            self._loop()
        except Exception:  # a bug in the sender itself: stop observing, never the node
            self._failed_here("sender", "the sender failed")
            if self.on_failure is not None:
                self.on_failure()

    def _failed_here(self, where: str, what: str) -> bool:
        """Called from an `except` block of this thread: fail(where), and log `what` with
        the traceback if it is the first failure. True if it is."""
        first = self.failed is None
        self.fail(where)
        if first:
            log.exception("batchscope: %s; this node is no longer observed", what)
        return first

    def _loop(self) -> None:
        """Ship the history until `_done()` (the transport's own)."""
        raise NotImplementedError

    def _problem(self, text: str) -> None:
        if text != self._last_problem:
            log.warning("batchscope: %s; buffering (session %s)", text, self.session)
            self._last_problem = text
