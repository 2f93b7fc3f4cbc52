"""Stored frames. Iteration frames go in blocks: consecutive frames of a session, one
`seq<TAB>text` line each, zlib-compressed together (a step repeats most of the step
before: about a tenth of the text). Other frames are stored one per row: zlib with a
preset dictionary of the protocol's own words, base64 text (prefix `f1:`). Rows without
the prefix (older recordings) are the plain frame text. What a reader gets back is exactly
the frame as it went over the wire.

The dictionary is part of the stored format: never change it, add `f2:` instead.
"""

from __future__ import annotations

import base64
import zlib

from protocol.codes import FrameType

PREFIX = "f1:"
_MEMBER = '{"req":"req-1","n":1,"start":100,"phase":"decode","prefix_hit":0,"sample":true},'
_DICT = (
    '{"v":1,"type":"config","session":"s-20261130-","seq":1,"ts":1796000000.0,"data":'
    '{"step":0,"config_version":1,"changes":{},"config":{"max_num_batched_tokens":256,'
    '"max_num_seqs":16,"max_model_len":1024,"enable_chunked_prefill":true,'
    '"long_prefill_token_threshold":0,"policy":"fcfs","block_size":16,"num_gpu_blocks":257,'
    '"enable_prefix_caching":true}}}'
    '{"v":1,"type":"session","session":"s-20261130-","seq":1,"data":{"event":"opened",'
    '"name":"live","source":"local","engine":"batchscope","runner":"sim","simulated":true,'
    '"model":"","device":"","started_at":1796000000.0}}'
    '{"v":1,"type":"request","session":"s-20261130-","seq":1,"ts":1796000000.0,"data":'
    '{"req":"req-1","kind":"arrived","step":1,"t":0.1,"detail":{"num_prompt_tokens":96,'
    '"max_tokens":48,"priority":0,"prompt_token_ids":[],"temperature":0.0}}}'
    '"kind":"scheduled","kind":"first_token","kind":"finished","detail":{"reason":"length",'
    '"num_output_tokens":48,"num_cached_tokens":0}}}"kind":"preempted","reason":"kv_blocks",'
    '{"v":1,"type":"iteration","session":"s-20261130-","seq":1,"ts":1796000000.0,"data":'
    '{"step":1,"t_start":0.1,"duration":0.001,"forward_ms":2.0,"overhead_us":40.0,'
    '"simulated":true,"scheduled":[' + _MEMBER * 3 + '{"req":"req-1","n":96,"start":0,'
    '"phase":"prefill","prefix_hit":0,"sample":false}],"new":[],"resumed":[],"preempted":[],'
    '"finished":[{"req":"req-1","reason":"length"}],"arrived":[],"rejected":[],"sampled":'
    '["req-1","req-2","req-3"],"queues":{"running":3,"waiting":0,"running_end":3,'
    '"waiting_end":0},"budget":{"max_tokens":256,"used":3,"max_seqs":16,"prefill":0,'
    '"decode":3},"kv":{"total":256,"used":15,"cached_free":222,"hit_tokens":0,"used_end":15},'
    '"blocks":[[8,"used","req-1",1],[9,"free",null,0],[10,"cached",null,0]],'
    '"waiting_reasons":{"req-1":"token_budget"},"config_version":0}}'
).encode()
# A 4 KiB window holds the dictionary and most of a frame; small state copies fast.
_WBITS = 12
_COMPRESS = zlib.compressobj(6, zlib.DEFLATED, _WBITS, 3, zlib.Z_DEFAULT_STRATEGY, _DICT)
_DECOMPRESS = zlib.decompressobj(_WBITS, _DICT)


def pack_frame(text: str) -> str:
    """The stored form of a frame's text."""
    co = _COMPRESS.copy()  # the dictionary is loaded once, not per frame
    packed = co.compress(text.encode()) + co.flush()
    return PREFIX + base64.b64encode(packed).decode("ascii")


def unpack_frame(stored: str) -> str:
    """The frame's text as it went over the wire."""
    if not stored.startswith(PREFIX):
        return stored
    do = _DECOMPRESS.copy()
    raw = do.decompress(base64.b64decode(stored[len(PREFIX) :])) + do.flush()
    return raw.decode()


BLOCK_LEVEL = 3
"""zlib's level for blocks. On the iteration frames of a 100,000-request flat-out
recording: level 3 compresses 2.4x faster than 6 for 13% more bytes (level 1: 2.7x,
19%); the writer compressed at 6 for a tenth of its time."""


BLOCK_TEXT_RATIO = 9
"""An iteration frame's text is about this many times what it adds to its block: 8.9 on a
flat-out 20,000-request recording at 256 running (1,317 MB of text in 149 MB of blocks),
10.4 at 96 running."""
ROW_TEXT_RATIO = 1.6
"""Any other frame's text is about this many times its row (`f1:`, base64): 1.56 on the
same recording (79 MB of request marks in 51 MB), 1.65 at 96 running."""
_ITERATION = FrameType.ITERATION.value


def stored_size(frame_type: str, text: str) -> int:
    """About how many bytes a frame of `frame_type` with this text stores: in a block
    (iteration frames) or in a row of its own (the others)."""
    if frame_type == _ITERATION:
        return len(text) // BLOCK_TEXT_RATIO
    return int(len(text) / ROW_TEXT_RATIO)


def pack_block(frames: list[tuple[int, str]]) -> bytes:
    """(seq, text) of consecutive frames of one session, in seq order, as one block."""
    text = "\n".join(f"{seq}\t{text}" for seq, text in frames)
    return zlib.compress(text.encode(), BLOCK_LEVEL)


def unpack_block(block: bytes) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for line in zlib.decompress(block).decode().split("\n"):
        seq, _, text = line.partition("\t")
        out.append((int(seq), text))
    return out
