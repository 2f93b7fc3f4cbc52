"""RecordingFold: one session's fold as the recorder stores it, in the recorder's writer
(app.db.writer_process) and the importer (app.records.importer) alike: its state, its
checkpoints on a clock, its live rows (app.db.live_rows) and the Gantt segments of each
request as it ends.

Under a long waiting queue a due checkpoint waits for its step's end, where the marks
of the step are all seen: it is then stored without the never-scheduled waiting rows if
the requests table gives them back exactly (app.db.checkpoint_queue), so a checkpoint
costs what runs and what is done, not the queue (a queue of 80,000 made the writer fall
behind a flat-out engine: every checkpoint serialised all of it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.db.checkpoint_codec import CheckpointClock, encode_checkpoint
from app.db.live_rows import LiveRowsTaker, encode_live_rows
from app.db.writes import ENDED_MARKS, Checkpoint
from app.frames.fold import SessionState
from protocol.codes import FrameType

REQUEST = FrameType.REQUEST.value


@dataclass
class Stored:
    """What folding a batch of frames gives to store with them."""

    checkpoints: list[Checkpoint] = field(default_factory=list)
    live_rows: list[Checkpoint] = field(default_factory=list)
    ended: dict[tuple[str, str], list[list[object]]] = field(default_factory=dict)
    """(session, req) -> the Gantt segments of a request that ended."""


class RecordingFold:
    def __init__(
        self, state: SessionState, checkpoint_every: int, taker: LiveRowsTaker | None
    ) -> None:
        """`taker`: None where the fold does not start at the session's first frame (its
        earlier marks unseen): no live rows, every checkpoint whole."""
        self.state = state
        self.taker = taker
        self.clock = CheckpointClock(checkpoint_every)

    def take(self, frame_type: str, seq: int, data: Any, text: str, out: Stored) -> None:
        """Fold one frame (`text`: its stored text), adding to `out` what it gives."""
        state, taker, clock = self.state, self.taker, self.clock
        if taker is not None:
            if clock.due() and taker.starts_step(state, frame_type, data):
                # (Before `made` counts this frame's row: the checkpoint is of the state
                # before it. Counted first, an arrival mark opening the step -- before
                # every step of a flat-out trace -- made every checkpoint whole: the whole
                # queue walked, two thirds of the writer at 100,000 requests.)
                out.checkpoints.append(self._checkpoint(taker))  # waited for the step end
            taker.made(state, frame_type, seq, data)
            rows = taker.before(state, frame_type, data)
            if rows is not None:
                encoded = encode_live_rows(rows)
                out.live_rows.append(Checkpoint(state.session, rows["seq"], rows["step"], encoded))
                taker.taken(len(encoded))
        state.apply(frame_type, seq, data)
        if frame_type == REQUEST and data.get("kind") in ENDED_MARKS:
            row = state.requests.get(data["req"])
            if row is not None:
                out.ended[(state.session, row["req"])] = [list(x) for x in row["segments"]]
        if taker is not None:
            taker.after(state, frame_type, data, text)
        clock.add(frame_type, text)
        if clock.due() and not (taker is not None and taker.waits(clock)):
            out.checkpoints.append(self._checkpoint(None))

    def _checkpoint(self, taker: LiveRowsTaker | None) -> Checkpoint:
        """The state's checkpoint: without its never-scheduled rows where `taker` (at a
        step end) says the requests table gives them back exactly, else whole."""
        state = self.state
        apart = None if taker is None else taker.apart_checkpoint(state)
        if apart is None:
            encoded = encode_checkpoint(state.to_checkpoint())
        else:
            rows, left_out = apart
            encoded = encode_checkpoint(state.to_checkpoint(rows), left_out)
        self.clock.taken(len(encoded))
        return Checkpoint(state.session, state.seq, max(state.step, 0), encoded)
