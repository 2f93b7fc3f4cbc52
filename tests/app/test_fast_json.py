"""app.fast_json reads every text as the standard library does (msgspec where it agrees,
`json` where it does not) and writes what reads back as the value."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app import fast_json

TEXTS = [
    '{"a":1,"a":2}',
    "[NaN, Infinity, -Infinity]",
    "[1e400]",
    "123456789012345678901234567890",
    '"\\ud800"',
    '"\\u00e9 \u00fc"',
    "[0.1, 1e-7, -0.0, 5e-324, 1.7976931348623157e308]",
    '{"k": [true, false, null, {}, []]}',
]


@pytest.mark.parametrize("text", TEXTS)
def test_it_reads_what_json_reads(text: str) -> None:
    assert repr(fast_json.loads(text)) == repr(json.loads(text))
    assert repr(fast_json.loads(text.encode("utf-8", "surrogatepass"))) == repr(json.loads(text))


@pytest.mark.parametrize("text", ["", "{", "[1,]", "nul", '{"a" 1}', "[1] x"])
def test_it_refuses_what_json_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        fast_json.loads(text)


VALUES: list[Any] = [
    {"a": [1, 2.5, None, True], "b": {"c": "d"}},
    {"\u00e9": "\u00fc\u4e2d"},
    2**70,
    -(2**70),
    "\ud800x",
    (1, 2),
    {1: 2},
    [0.1, 1e-7, 1e22, 123456789.123456789],
]


@pytest.mark.parametrize("value", VALUES)
def test_what_it_writes_reads_back_as_json_would(value: Any) -> None:
    text = fast_json.dumps(value)
    assert isinstance(text, bytes)
    assert json.loads(text) == json.loads(json.dumps(value))
    assert fast_json.loads(text) == json.loads(json.dumps(value))
