"""static/js/waiting.js words every waiting reason as engine/waiting.py does: both read
the one table of sentences (engine.waiting.WAITING_SENTENCES, copied into
static/js/protocol.js), each with its own reader. Node runs the page's module on
thousands of details, the scheduler's and odd ones (missing, null, zero, false values,
unknown reasons), and the words must be the same to the byte. (tests/browser/
test_forensics.py checks the same in Chromium on a recorded session.)"""

from __future__ import annotations

import json
import random
import subprocess
from typing import Any

from engine.waiting import WAITING_SENTENCES, waiting_text
from tests.conftest import ROOT

WAITING_JS = ROOT / "static" / "js" / "waiting.js"
RUN = (
    f'import {{ waitingText }} from "{WAITING_JS.as_uri()}";\n'
    'import { readFileSync } from "node:fs";\n'
    'const cases = JSON.parse(readFileSync(0, "utf8"));\n'
    "console.log(JSON.stringify(cases.map((c) => waitingText(c[0], c[1], c[2]))));\n"
)
WORDS = ("head", "policy", "largest_chunk_req", "cache_aware_ahead")
FLAGS = ("full_sequence", "throttled_by_coordinator")
NUMBERS = (
    "blocks_used", "blocks_usable", "blocks_free", "blocks_needed", "padded_tokens",
    "budget_left", "budget_used", "budget_max", "num_decodes", "largest_chunk_tokens",
    "num_prefill_chunks", "max_num_seqs", "max_num_active_seqs", "num_running",
    "watermark_blocks", "until_step", "prefill_schedule_interval", "cache_aware_cached_tokens",
    "cache_aware_window", "tokens_needed", "num_preempted", "batch_size",
)  # fmt: skip
"""The detail's keys the sentences read (protocol.wire.WaitingDetail), by type."""


def _cases(n: int) -> list[tuple[str, str, dict[str, Any] | None]]:
    """`n` (request, reason, detail): each key present or not, null, zero or empty
    sometimes."""
    rng = random.Random(34)
    pools: dict[str, list[Any]] = {
        **{k: ["", "r3", "priority", "fcfs", None] for k in WORDS},
        **{k: [True, False, None] for k in FLAGS},
        **{k: [0, 1, 2, 17, None] for k in NUMBERS},
    }
    reasons = [*WAITING_SENTENCES, "something_new", "toString", "constructor"]
    cases: list[tuple[str, str, dict[str, Any] | None]] = []
    for _ in range(n):
        detail = {k: rng.choice(pool) for k, pool in pools.items() if rng.random() < 0.5}
        cases.append((f"r{rng.randrange(9)}", rng.choice(reasons), detail or None))
    return cases


def test_waiting_js_words_every_reason_as_python_does(node_js: str) -> None:
    cases = _cases(3000)
    done = subprocess.run(
        [node_js, "--no-warnings", "--input-type=module", "-e", RUN],
        input=json.dumps(cases), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    words = json.loads(done.stdout)
    expected = [waiting_text(req, reason, detail) for req, reason, detail in cases]
    differ = [(c, w, e) for c, w, e in zip(cases, words, expected, strict=True) if w != e]
    assert not differ, differ[:3]
    # Every wording was said, the phrases of a list too, and the fallback.
    for reason, sentences in WAITING_SENTENCES.items():
        said = [e for (_, r, _), e in zip(cases, expected, strict=True) if r == reason]
        assert all(any(w.startswith(s.text.partition("{")[0]) for w in said) for s in sentences)
    for words in (" decodes + ", " more prefill chunks)", ": nothing)", "waits: policy_order"):
        assert any(words in e for e in expected), words
