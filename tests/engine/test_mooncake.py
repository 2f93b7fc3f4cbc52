"""Mooncake traces in (engine/mooncake.py): prompts share exactly the blocks their hash
ids share, arrivals keep their timestamps, and each bad line is named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.mooncake import (
    BlockNumbering,
    TraceError,
    parse_trace,
    read_trace,
    trace_scenario,
)
from engine.scenario import parse_scenario
from engine.simulate import run_scenario
from tests.engine.trace_gen import generate_trace, write_trace

B = 32


def _line(ts: float, n_in: int, n_out: int, ids: list[int]) -> str:
    return json.dumps(
        {"timestamp": ts, "input_length": n_in, "output_length": n_out, "hash_ids": ids}
    )


def test_shared_ids_share_tokens_exactly_and_the_rest_is_unique() -> None:
    rows = parse_trace(
        [
            _line(0, 2 * B + 5, 3, [0, 1, 2]),
            _line(10, 2 * B, 4, [0, 1]),
            _line(10, B + 7, 2, [0, 3]),
            _line(25, 3 * B, 1, [0]),  # blocks past its one id: its own tokens
            _line(30, 3 * B, 1, [4]),
        ],
        block_tokens=B,
    )
    reqs = trace_scenario(rows, B, tokens=True)["requests"]
    p = [r["prompt_token_ids"] for r in reqs]
    assert [len(x) for x in p] == [2 * B + 5, 2 * B, B + 7, 3 * B, 3 * B]
    assert p[0][: 2 * B] == p[1] and p[2][:B] == p[0][:B] == p[3][:B]
    assert p[2][B:] != p[0][B : 2 * B][:7]
    assert p[3][B : 2 * B] != p[0][B : 2 * B] and p[3][2 * B :] != p[0][:B]
    assert p[4][:B] != p[0][:B]
    assert [r["arrival_time_ms"] for r in reqs] == [0, 10, 10, 25, 30]
    assert [r["max_tokens"] for r in reqs] == [3, 4, 2, 1, 1]
    assert all(3 <= t <= 258 for x in p for t in x)  # valid for the byte-level model
    # The same trace always gives the same tokens (prefix caching is reproducible).
    assert trace_scenario(rows, B, tokens=True)["requests"] == reqs


def test_a_simulated_trace_hits_the_shared_blocks_and_produces_every_output(
    tmp_path: Path,
) -> None:
    rows = read_trace(write_trace(tmp_path / "t.jsonl", generate_trace(400, B, seed=3)), B)
    data = trace_scenario(rows, B)
    data["config"]["block_size"] = 16
    result = run_scenario(parse_scenario(data))
    assert result["completed"] == len(rows)
    by_id = result["requests"]
    for i, row in enumerate(rows):
        rec = by_id[f"trace-{i}"]
        assert rec["num_output_tokens"] == row.output_length
        assert rec["arrival_ms"] == row.timestamp
    hits = sum(r["prefix_cache_hit_tokens_first_admission"] or 0 for r in by_id.values())
    assert hits > 0.2 * sum(r.input_length for r in rows)


def test_block_numbering_numbers_contents_in_order_of_first_appearance() -> None:
    n = BlockNumbering(4)
    a = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert n.ids(a) == [0, 1, 2]
    assert n.ids([*a[:8], 10]) == [0, 1, 3]
    assert n.ids([9, 9, 9, 9, *a[4:8]]) == [4, 5]  # same block after another parent: new id
    assert n.ids(a[:6]) == [0, 6]  # a partial block is a content of its own
    assert n.fresh(9) == [7, 8, 9]


BAD = [
    ("not json", ["{nope"], "line 1: not valid JSON"),
    ("not an object", ["[1, 2]"], "line 1: must be a JSON object"),
    (
        "missing field",
        [_line(0, 5, 1, []), '{"timestamp": 1, "input_length": 5, "hash_ids": []}'],
        "line 2: missing field output_length",
    ),
    ("negative input", [_line(0, -5, 1, [])], "line 1: input_length: must be at least 1, got -5"),
    ("negative output", [_line(0, 5, -1, [])], "line 1: output_length: must be at least 1"),
    (
        "string length",
        ['{"timestamp": 0, "input_length": "5", "output_length": 1, "hash_ids": []}'],
        "line 1: input_length: must be an integer",
    ),
    ("negative time", [_line(-1, 5, 1, [])], "line 1: timestamp: must be >= 0"),
    (
        "unsorted",
        [_line(0, 5, 1, []), "", _line(20, 5, 1, []), _line(10, 5, 1, [])],
        "line 4: timestamp 10 is before line 3's 20",
    ),
    ("bad ids", [_line(0, 5, 1, [0, -1])], "line 1: hash_ids: must be a list of integers"),
    ("too many ids", [_line(0, B, 1, [0, 1])], "line 1: hash_ids: 2 ids, but input_length 32"),
    ("empty", ["", "  "], "no requests"),
]


@pytest.mark.parametrize(("lines", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_traces_name_the_line(lines: list[str], message: str) -> None:
    with pytest.raises(TraceError) as err:
        parse_trace(lines, block_tokens=B)
    assert str(err.value).startswith(message), str(err.value)


def test_a_request_longer_than_max_model_len_is_named() -> None:
    lines = [_line(0, 100, 10, []), _line(5, 1000, 30, [])]
    with pytest.raises(TraceError) as err:
        parse_trace(lines, block_tokens=B, max_model_len=1024)
    message = "input_length 1000 + output_length 30 = 1030 tokens does not fit max_model_len 1024"
    assert str(err.value) == f"line 2: {message}"
