"""Fixtures of tests/vllm: one vLLM venv per release, `serve --no-engine` dashboards, and
one adapter run per release that the tests share (vLLM's import alone takes seconds)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.app.records.conftest import new_database  # noqa: F401 (a fixture: both backends)
from tests.conftest import ROOT
from tests.vllm.venvs import RELEASES, require_vllm, run_tool
from tests.vllm_node.observed import start_dashboard

SCENARIOS = ("kv_pressure", "shared_prefixes", "priority", "spec_decode", "long_prompt_vs_decodes")
# Through vLLM's AsyncScheduler and the batch-queue loop (two batches in flight).
ASYNC_SCENARIOS = ("kv_pressure", "async_placeholders")
LATER_KNOBS: dict[str, dict[str, Any]] = {
    # kv_pressure under the knobs of later releases (where the release has them).
    "later_interval_watermark": {"prefill_schedule_interval": 3, "watermark": 0.1},
    "later_active_seqs": {"max_num_active_seqs": 2},
}
LATER_RELEASES = ("0.33", "0.34")
"""The releases that have the later knobs (LATER_KNOBS)."""
DASHBOARD_START_S = 180.0


@dataclass(frozen=True)
class AdapterRun:
    release: str
    base: str
    db_url: str
    out_dir: Path
    names: list[str]
    """One result per name: DIR/<name>.json (the stem, `.async` for the async loop)."""
    paths: dict[str, Path]
    """The scenario file of each name."""


@pytest.fixture(scope="session", params=RELEASES)
def vllm_release(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(release, its venv's python), once per release."""
    release = str(request.param)
    return release, require_vllm(release)


@contextlib.contextmanager
def serve_dashboard(where: Path) -> Iterator[tuple[str, str]]:
    """(base URL, database URL) of a live `serve --no-engine` dashboard (a generous start
    deadline: a loaded 2-core box can take over 30 s)."""
    dash = start_dashboard(where, timeout=DASHBOARD_START_S)
    try:
        yield dash.url, dash.db_url
    finally:
        dash.stop()


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[tuple[str, str]]:
    with serve_dashboard(tmp_path) as dash:
        yield dash


def _later_scenarios(release: str, where: Path) -> dict[str, Path]:
    if release not in LATER_RELEASES:
        return {}
    base = json.loads((ROOT / "scenarios" / "kv_pressure.json").read_text())
    out: dict[str, Path] = {}
    for name, knobs in LATER_KNOBS.items():
        data = {**base, "name": name}
        data["config"] = {**base["config"], **knobs, "vllm_version": release}
        out[name] = where / f"{name}.json"
        out[name].write_text(json.dumps(data))
    return out


PREFIX_SCENARIO = "prefix_1024"
"""Two prompts sharing their first 1024 tokens (two 512-token trace blocks), then
different; a third sharing nothing: their arrivals' block hashes (Mooncake export)."""


def _prefix_scenario(release: str, where: Path) -> dict[str, Path]:
    shared = [100 + (7 * j) % 5000 for j in range(1024)]
    prompts = {
        "p-a": shared + [6000 + j for j in range(200)],
        "p-b": shared + [7000 + j for j in range(300)],
        "p-c": [9000 + (3 * j) % 4000 for j in range(600)],
    }
    data = {
        "name": PREFIX_SCENARIO,
        "description": "two prompts share a 1024-token prefix, one shares nothing",
        "config": {
            "vllm_version": release,
            "max_num_batched_tokens": 512,
            "max_num_seqs": 4,
            "block_size": 16,
            "num_gpu_blocks": 400,
            "enable_chunked_prefill": True,
            "enable_prefix_caching": True,
            "max_model_len": 2048,
        },
        "requests": [
            {"id": req, "arrival_step": i * 2, "prompt_token_ids": ids, "max_tokens": 4}
            for i, (req, ids) in enumerate(prompts.items())
        ],
    }
    path = where / f"{PREFIX_SCENARIO}.json"
    path.write_text(json.dumps(data))
    return {PREFIX_SCENARIO: path}


@pytest.fixture(scope="session")
def adapter_run(
    vllm_release: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AdapterRun]:
    """The shipped scenarios (and, on 0.33 and 0.34, kv_pressure under their later knobs) through
    vLLM's real scheduler observed by batchscope_vllm, streamed into a dashboard."""
    release, python = vllm_release
    where = tmp_path_factory.mktemp(f"vllm-{release}")
    paths = {s: ROOT / "scenarios" / f"{s}.json" for s in SCENARIOS}
    paths.update(_later_scenarios(release, where))
    paths.update(_prefix_scenario(release, where))
    async_paths = {f"{s}.async": ROOT / "scenarios" / f"{s}.json" for s in ASYNC_SCENARIOS}
    out_dir = where / "out"
    with serve_dashboard(where) as (base, db_url):
        args = ["vllm_adapter_drive.py", *map(str, paths.values())]
        args += ["--async-scenarios", *map(str, async_paths.values()), "--out-dir", str(out_dir)]
        run_tool(python, base, args, timeout=400)
        names = [*paths, *async_paths]
        yield AdapterRun(release, base, db_url, out_dir, names, {**paths, **async_paths})
