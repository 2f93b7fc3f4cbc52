"""Run vLLM 0.20's own n-gram matcher on cases read from stdin (JSON), print its drafts.

Run with a vLLM venv's python. It does not import vllm (that takes seconds): it takes
`_find_longest_matched_ngram_and_propose_tokens` out of the installed
vllm/v1/spec_decode/ngram_proposer.py and runs it as plain Python over numpy arrays
(numba's `jit` replaced by the identity), so the test compares against vLLM's code itself.

stdin: {"min_n": int, "max_n": int, "max_model_len": int, "k": int, "cases": [[ids...], ...]}
stdout: [[drafts...], ...]
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

FUNCTION = "_find_longest_matched_ngram_and_propose_tokens"


def load_matcher() -> Any:
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("vllm is not installed in this interpreter")
    path = Path(next(iter(spec.submodule_search_locations))) / "v1/spec_decode/ngram_proposer.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == FUNCTION)
    module = ast.Module(body=[node], type_ignores=[])
    namespace: dict[str, Any] = {"np": np, "jit": lambda **_: lambda f: f}
    exec(compile(module, str(path), "exec"), namespace)
    return namespace[FUNCTION]


def main() -> None:
    matcher = load_matcher()
    job = json.load(sys.stdin)
    out = [
        matcher(
            np.array(ids, dtype=np.int32),
            job["min_n"],
            job["max_n"],
            job["max_model_len"],
            job["k"],
        ).tolist()
        for ids in job["cases"]
    ]
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
