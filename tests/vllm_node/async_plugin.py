"""TEST-ONLY vLLM general plugin: async scheduling on vLLM's CPU platform.

vLLM's CPU platform turns async scheduling off (`CpuPlatform.check_and_update_config`:
"async scheduling is not required on CPU"), so a CPU `vllm serve` always runs the sync
engine loop. To observe the async loop (vLLM's AsyncScheduler and the batch queue) on a
real server here, this plugin wraps that hook and turns async scheduling back on after it.
It is never installed: `plugin_site()` writes a metadata-only dist-info whose
`entry_points.txt` registers `register` under `vllm.general_plugins`, in a directory the
test puts on the server's PYTHONPATH. It acts only while BATCHSCOPE_TEST_ASYNC_SCHEDULING=1
is set in the server's environment; it is not a supported way to run vLLM on CPU.

This module is imported inside vLLM's processes: it imports only the standard library at
import time (vLLM itself inside `register`).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

ENV = "BATCHSCOPE_TEST_ASYNC_SCHEDULING"
DIST = "batchscope_test_only_async_plugin"
ENTRY_POINT = f"{__name__}:register"


def register() -> None:
    """vLLM calls this in every process (API server, engine core, workers), maybe twice."""
    if os.environ.get(ENV) != "1":
        return
    cpu_platform: Any = importlib.import_module("vllm.platforms.cpu").CpuPlatform
    original = cpu_platform.__dict__["check_and_update_config"].__func__
    if getattr(original, "_batchscope_test_only", False):
        return  # already wrapped in this process

    def check_and_update_config(cls: Any, vllm_config: Any) -> None:
        original(cls, vllm_config)
        vllm_config.scheduler_config.async_scheduling = True

    check_and_update_config._batchscope_test_only = True  # type: ignore[attr-defined]
    cpu_platform.check_and_update_config = classmethod(check_and_update_config)


def plugin_site(directory: Path) -> Path:
    """Write the dist-info that registers this plugin into `directory` (for PYTHONPATH);
    the module itself is imported from the repository root, already on it."""
    info = directory / f"{DIST}-0.0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: 0.0.0\n")
    (info / "entry_points.txt").write_text(
        f"[vllm.general_plugins]\nbatchscope_test_only_async = {ENTRY_POINT}\n"
    )
    return directory
