"""The prompt-lookup n-gram drafter: hand cases, and vLLM 0.20's own matcher on random ones."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from engine.runner.ngram import NgramProposer, ngram_drafts

ROOT = Path(__file__).resolve().parents[2]


def drafts(
    ids: list[int], k: int = 4, min_n: int = 2, max_n: int = 5, max_len: int = 100
) -> list[int]:
    return ngram_drafts(ids, k, min_n, max_n, max_len)


def test_match_proposes_the_tokens_that_followed() -> None:
    assert drafts([1, 2, 3, 4, 5, 6, 9, 1, 2]) == [3, 4, 5, 6]


def test_no_match_proposes_nothing() -> None:
    assert drafts([1, 2, 3, 4, 5, 6]) == []
    # The last token alone repeats, but min_n is 2.
    assert drafts([7, 1, 2, 3, 7]) == []
    assert drafts([7, 1, 2, 3, 7], min_n=1) == [1, 2, 3, 7]
    # Shorter than min_n, or empty.
    assert drafts([5], min_n=2) == []
    assert drafts([]) == []


def test_longer_ngram_is_preferred_over_an_earlier_shorter_one() -> None:
    # (8, 9) occurs first at 0 (followed by 1), but (7, 8, 9) occurs at 4 (followed by 2).
    ids = [8, 9, 1, 1, 7, 8, 9, 2, 3, 0, 7, 8, 9]
    assert drafts(ids, k=2) == [2, 3]
    # Capped at max_n = 2, only (8, 9) counts: its earliest occurrence wins.
    assert drafts(ids, k=2, max_n=2) == [1, 1]


def test_earliest_occurrence_of_the_longest_match_wins() -> None:
    # (1, 2) occurs at 0 and at 4: vLLM takes the earliest.
    assert drafts([1, 2, 5, 6, 1, 2, 7, 8, 1, 2], k=2) == [5, 6]


def test_proposal_is_truncated_at_k_at_the_end_and_at_max_model_len() -> None:
    ids = [1, 2, 3, 4, 5, 6, 7, 1, 2]
    assert drafts(ids, k=2) == [3, 4]
    # A match near the end proposes fewer than k (never padded).
    assert drafts([4, 1, 2, 9, 1, 2], k=4) == [9, 1, 2]
    # Overlapping the suffix it matches: `a a a` proposes one `a`.
    assert drafts([3, 3, 3], k=4) == [3]
    # k is capped by max_model_len - len(context); none once the context reaches it.
    assert drafts(ids, k=4, max_len=11) == [3, 4]
    assert drafts(ids, k=4, max_len=9) == []


def test_ids_beyond_32_bits_and_byte_patterns_off_the_grid() -> None:
    big = 1 << 40
    assert drafts([big, 2, 9, big, 2]) == [9, big, 2]
    # Three 256s hold the bytes of (1, 1) one byte off the id grid: not a match.
    assert drafts([256, 256, 256, 5, 1, 1]) == []
    assert drafts([256, 256, 256, 1, 1, 4, 1, 1]) == [4, 1, 1]


def test_proposer_batches_requests_in_order() -> None:
    proposer = NgramProposer(min_n=2, max_n=3, max_model_len=64)
    requests = [("a", [1, 2, 3, 1, 2]), ("b", [4, 5, 6]), ("c", [9, 9, 9, 9])]
    assert proposer.propose(requests, 2) == [[3, 1], [], [9]]
    assert proposer.propose(requests, 0) == [[], [], []]
    with pytest.raises(ValueError):
        NgramProposer(min_n=3, max_n=2, max_model_len=64)


def test_the_drafter_is_stdlib_only() -> None:
    code = "import sys, engine.runner.ngram; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _vllm_python() -> str | None:
    for path in (
        os.environ.get("BATCHSCOPE_VLLM_PYTHON", ""),
        str(ROOT / ".venv-vllm" / "bin" / "python"),
        "/work/vllm-venv/bin/python",
    ):
        if path and os.access(path, os.X_OK):
            return path
    return None


@pytest.mark.parametrize("min_n,max_n,k", [(1, 3, 3), (2, 5, 4), (3, 3, 7)])
def test_drafts_equal_vllm_ngram_proposer(min_n: int, max_n: int, k: int) -> None:
    """vLLM 0.20's own matcher (run from its installed source) on random contexts with
    many repeats, including contexts at and near max_model_len."""
    python = _vllm_python()
    if python is None:
        pytest.skip("no vLLM venv (tools/setup_vllm_venv.sh or BATCHSCOPE_VLLM_PYTHON)")
    rng = random.Random(min_n * 100 + max_n * 10 + k)
    cases = []
    for _ in range(300):
        alphabet = rng.sample([0, 1, 7, 256, 257, 65536, 31999, 1 << 30], rng.randint(1, 5))
        cases.append([rng.choice(alphabet) for _ in range(rng.randint(0, 60))])
    max_model_len = 58
    job = {"min_n": min_n, "max_n": max_n, "max_model_len": max_model_len, "k": k}
    done = subprocess.run(
        [python, str(ROOT / "tests" / "runner" / "vllm_ngram_oracle.py")],
        input=json.dumps({**job, "cases": cases}),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    expected = json.loads(done.stdout)
    got = [ngram_drafts(ids, k, min_n, max_n, max_model_len) for ids in cases]
    assert sum(map(bool, expected)) > 100
    assert got == expected
