"""Every code the protocol spells (docs/protocol.md), defined once: frame and message types,
request-mark kinds, waiting reasons, block states, request statuses, phases and the
kinds of a request's Gantt segments.

StrEnums: a member is a `str` (equal to, and hashing like, its value; JSON encodes it as
the plain string), so producers put members in frames at no cost and readers compare what
they parsed against members. static/js/protocol.js is generated from this module
(tools/gen_protocol_js.py).
"""

from __future__ import annotations

import sys
from enum import Enum

if sys.version_info >= (3, 11):  # noqa: UP036
    from enum import StrEnum
else:  # pragma: no cover - the vLLM adapter's wheel supports Python 3.10

    class StrEnum(str, Enum):  # noqa: UP042
        """enum.StrEnum of Python 3.11: members are their values."""

        __str__ = str.__str__
        __format__ = str.__format__
        __hash__ = str.__hash__


class FrameType(StrEnum):
    """The `type` of a frame of a session (the envelope's, docs/protocol.md)."""

    ITERATION = "iteration"
    REQUEST = "request"
    CONFIG = "config"
    SESSION = "session"
    SNAPSHOT = "snapshot"
    FAILED = "failed"
    """The producer's engine stopped where vLLM's would (`step`, `assertion`, `detail`:
    engine.faults); it steps no more."""
    GAP = "gap"


RECORDED_FRAME_TYPES = (
    FrameType.ITERATION,
    FrameType.REQUEST,
    FrameType.CONFIG,
    FrameType.SESSION,
)
"""The frame types a producer sends and a recording stores (snapshot and gap are the
dashboard's own, to its viewers)."""


class MessageType(StrEnum):
    """The `type` of a control message (a node's socket, the engine link, a viewer's hello)."""

    ANNOUNCE = "announce"
    WELCOME = "welcome"
    STATS = "stats"
    COMMAND = "command"
    REPLY = "reply"
    ERROR = "error"
    ACK = "ack"
    HELLO = "hello"
    PING = "ping"
    PONG = "pong"


class CommandKind(StrEnum):
    """The `kind` of a `command` message: what a dashboard asks a producer of ours (a
    pushing `batchscope engine`, the dashboard's own engine process) to do."""

    ADD_REQUEST = "add_request"
    ADD_REQUESTS = "add_requests"
    ABORT = "abort"
    UPDATE_CONFIG = "update_config"
    PAUSE = "pause"
    RESUME = "resume"
    STEP = "step"
    WORKLOAD = "workload"
    """The dashboard's own engine process only, as are the two below."""
    LOAD_SCENARIO = "load_scenario"
    NEW_SESSION = "new_session"


class ReplayCommand(StrEnum):
    """The `type` of a replay viewer's message on /ws/live after its hello (docs/protocol.md,
    "Replay on the same socket")."""

    SEEK = "seek"
    PLAY = "play"
    PAUSE = "pause"
    STEP = "step"


class RequestMark(StrEnum):
    """The `kind` of a `request` frame: one step of a request's lifecycle."""

    ARRIVED = "arrived"
    REJECTED = "rejected"
    SCHEDULED = "scheduled"
    FIRST_TOKEN = "first_token"
    PREEMPTED = "preempted"
    RESUMED = "resumed"
    FINISHED = "finished"
    ABORTED = "aborted"


class SessionEvent(StrEnum):
    """The `event` of the `session` frames the dashboard reads (others pass through)."""

    OPENED = "opened"
    CLOSED = "closed"
    STATE = "state"
    FAILED = "failed"
    """The producer's engine stopped where vLLM's would (`step`, `assertion`, `detail`:
    engine.faults); it steps no more."""
    GAP = "gap"
    """Seqs the dashboard never received (`from_seq`, `to_seq`): its own mark, not a
    producer's."""


class WaitingReason(StrEnum):
    """Why a waiting request waited this step (an iteration's `waiting_reasons` values)."""

    TOKEN_BUDGET = "token_budget"
    MAX_NUM_SEQS = "max_num_seqs"
    KV_BLOCKS = "kv_blocks"
    POLICY_ORDER = "policy_order"
    PREEMPTION_THIS_STEP = "preemption_this_step"
    NO_CHUNKING_FIT = "no_chunking_fit"
    PAUSED = "paused"
    STATIC_BATCH = "static_batch"
    MAX_NUM_ACTIVE_SEQS = "max_num_active_seqs"
    KV_WATERMARK = "kv_watermark"
    PREFILL_THROTTLED = "prefill_throttled"
    CACHE_AWARE_ORDER = "cache_aware_order"
    """0.34+ cache-aware admission moved a request with a cached prefix ahead of it."""
    # The gates only a vLLM node has (its adapter reports them; our engine has no such
    # requests).
    STRUCTURED_OUTPUT = "structured_output"
    REMOTE_KV = "remote_kv"
    STREAMING_INPUT = "streaming_input"
    LORA_LIMIT = "lora_limit"
    OUTPUT_IN_FLIGHT = "output_in_flight"


# The reasons as module constants, the names engine and adapter code has always used.
TOKEN_BUDGET = WaitingReason.TOKEN_BUDGET
MAX_NUM_SEQS = WaitingReason.MAX_NUM_SEQS
KV_BLOCKS = WaitingReason.KV_BLOCKS
POLICY_ORDER = WaitingReason.POLICY_ORDER
PREEMPTION_THIS_STEP = WaitingReason.PREEMPTION_THIS_STEP
NO_CHUNKING_FIT = WaitingReason.NO_CHUNKING_FIT
PAUSED = WaitingReason.PAUSED
STATIC_BATCH = WaitingReason.STATIC_BATCH
MAX_NUM_ACTIVE_SEQS = WaitingReason.MAX_NUM_ACTIVE_SEQS
KV_WATERMARK = WaitingReason.KV_WATERMARK
PREFILL_THROTTLED = WaitingReason.PREFILL_THROTTLED
CACHE_AWARE_ORDER = WaitingReason.CACHE_AWARE_ORDER
STRUCTURED_OUTPUT = WaitingReason.STRUCTURED_OUTPUT
REMOTE_KV = WaitingReason.REMOTE_KV
STREAMING_INPUT = WaitingReason.STREAMING_INPUT
LORA_LIMIT = WaitingReason.LORA_LIMIT
OUTPUT_IN_FLIGHT = WaitingReason.OUTPUT_IN_FLIGHT

HEAD_GATES = frozenset({KV_BLOCKS, KV_WATERMARK, NO_CHUNKING_FIT})
"""Gates of the head request alone: the head waits for the gate, the requests behind it
wait `policy_order` (the engine, the vLLM adapter and a recording's reader all say so)."""


class BlockState(StrEnum):
    """A KV block's state in an iteration's `blocks` changes."""

    FREE = "free"
    """Never used, or freed with nothing reusable in it."""
    CACHED = "cached"
    """Free but still reusable by its hash (prefix cache)."""
    USED = "used"
    SHARED = "shared"
    """Used by more than one request (ref_cnt > 1)."""
    WITHHELD = "withheld"
    """Out of service under a KV pool limit."""


HELD_BLOCK_STATES = (BlockState.USED, BlockState.SHARED)
"""The states of a block that some request holds."""


class RequestStatus(StrEnum):
    """A request row's `status` (the live table's)."""

    WAITING = "WAITING"
    RUNNING = "RUNNING"
    PREEMPTED = "PREEMPTED"
    FINISHED = "FINISHED"
    REJECTED = "REJECTED"


class Phase(StrEnum):
    """A scheduled row's `phase`."""

    PREFILL = "prefill"
    DECODE = "decode"


class SegmentKind(StrEnum):
    """The kind of a request row's Gantt segment (`segments[i][0]`, protocol.views.Segment):
    a scheduled span is its Phase; between them the request waits or lost its work."""

    WAITING = "waiting"
    PREFILL = Phase.PREFILL.value
    DECODE = Phase.DECODE.value
    PREEMPTED = "preempted"
