"""`batchscope vllm-check` refuses what is not a release with exit code 2 and one message
(the check itself runs against the real vLLM in tests/vllm/test_release_loops.py)."""

from __future__ import annotations

import pytest

from tests.conftest import cli


@pytest.mark.parametrize("release", ["0.3x", "latest", "0", "-1"])
def test_not_a_release_is_a_usage_error(release: str) -> None:
    proc = cli("vllm-check", release)
    assert proc.returncode == 2
    assert "is not a vLLM release" in proc.stderr and "Traceback" not in proc.stderr
