"""The distributions as a user installs them, outside the checkout.

batchscope: the wheel is built from a clean copy of the sources and installed into a
fresh venv; from a temporary directory its `batchscope` command migrates a database,
serves (the page, a static asset, /ws/live), simulates a scenario the wheel ships, and
exports a recording. batchscope-vllm: its wheel holds only the adapter and the shared
`protocol` package, needs only websockets, and streams to a dashboard with nothing else
importable. Both wheels carry `protocol` (asserted).

Dependencies: the fresh venv has no pip and no index; a path-only .pth adds a directory
of dependencies (the project venv's site-packages, or one holding websockets alone).
site.py does not process .pth files found in a directory added that way, so the
checkout's editable install stays invisible: what is imported is the wheel (asserted).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import httpx
import websockets.sync.client as ws_client

from app.db.migrate import head_revision
from tests.conftest import ROOT, TOKEN, free_port, start_server
from tests.lifeline import die_with_us

SITE = Path(sysconfig.get_paths()["purelib"])
SOURCES = (
    "pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "alembic.ini", "app", "engine",
    "migrations", "templates", "static", "scenarios", "docs", "batchscope_vllm", "protocol",
    "packaging/batchscope-vllm",
)  # fmt: skip


def _copy_sources(dest: Path) -> Path:
    dest.mkdir(parents=True)
    for name in SOURCES:
        src = ROOT / name
        if src.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)
    return dest


def _wheel(project: Path, out: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "--no-index", "-w", str(out), str(project)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    (wheel,) = out.glob("*.whl")
    return wheel


def _venv(where: Path, wheel: Path, deps: Path) -> Path:
    """A fresh venv with `wheel` installed and `deps` on its path; returns its bin/."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=60
    )
    python = where / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         "--no-index", str(wheel)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    (Path(purelib) / "_deps.pth").write_text(f"{deps}\n")
    return where / "bin"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["DATABASE_URL"] = "sqlite:///rec.db"
    return env


def _run(bin_dir: Path, cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [str(bin_dir / "batchscope"), *args],
        cwd=cwd, env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def test_the_wheel_installs_and_runs_outside_the_checkout(tmp_path: Path) -> None:
    wheel = _wheel(_copy_sources(tmp_path / "src"), tmp_path / "dist")
    bin_dir = _venv(tmp_path / "venv", wheel, SITE)
    work = tmp_path / "work"
    work.mkdir()
    where = subprocess.run(
        [str(bin_dir / "python"), "-c", "import app.resources as r; print(r.asset_path('static'))"],
        cwd=work, env=_env(), capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    assert where.startswith(str(tmp_path / "venv")) and where.endswith("app/_assets/static")
    protocol_at = subprocess.run(
        [str(bin_dir / "python"), "-c", "import protocol.codes as c; print(c.__file__)"],
        cwd=work, env=_env(), capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    assert protocol_at.startswith(str(tmp_path / "venv"))  # the shared package is in the wheel
    assert "batchscope 0.1.0" in _run(bin_dir, work, "--version")
    assert f"at revision {head_revision()}" in _run(bin_dir, work, "db", "upgrade")

    port = free_port()
    serve = subprocess.Popen(
        [str(bin_dir / "batchscope"), "serve", "--runner", "sim", "--workload", "none",
         "--port", str(port), "--token", TOKEN],
        cwd=work, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=die_with_us(),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    try:
        deadline = time.monotonic() + 30
        while True:
            assert serve.poll() is None, serve.communicate()[0]
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.1)
        page = httpx.get(url + "/")
        assert page.status_code == 200 and "<html" in page.text.lower()
        assert httpx.get(url + "/static/vendor/htmx-2.0.11.min.js").status_code == 200
        assert httpx.get(url + "/guide/demo").status_code == 200  # docs/ pages ship too
        with ws_client.connect(url.replace("http", "ws") + "/ws/live") as ws:
            ws.send(json.dumps({"type": "hello", "session": None, "last_seq": None}))
            first = json.loads(ws.recv(timeout=10))
        assert first["type"] == "snapshot"
        body = {"prompt_len": 12, "max_tokens": 3}
        assert httpx.post(url + "/api/requests", json=body, headers=headers).status_code == 201
        session = first["session"]
        while httpx.get(url + f"/api/sessions/{session}").status_code != 200:
            assert time.monotonic() < deadline + 30, "nothing was recorded"
            time.sleep(0.2)
    finally:
        serve.terminate()
        serve.communicate(timeout=30)

    scenario = Path(where).parent / "scenarios" / "seed.json"
    assert "step" in _run(bin_dir, work, "simulate", str(scenario), "--table")
    _run(bin_dir, work, "export", session, "--out", "s.jsonl")
    header, *frames = [json.loads(x) for x in (work / "s.jsonl").read_text().splitlines()]
    assert header["session"]["id"] == session
    assert {f["type"] for f in frames} >= {"iteration", "request"}


def test_the_vllm_adapter_installs_with_only_websockets(tmp_path: Path) -> None:
    src = _copy_sources(tmp_path / "src")
    wheel = _wheel(src / "packaging" / "batchscope-vllm", tmp_path / "dist")
    deps = tmp_path / "deps"
    deps.mkdir()
    (deps / "websockets").symlink_to(SITE / "websockets")
    bin_dir = _venv(tmp_path / "venv", wheel, deps)
    live, server, thread = start_server(engine=False)
    probe = f"""
import sys, time
import batchscope_vllm
from batchscope_vllm.sender import Sender
sender = Sender(url="{live.ws_url}/ws/ingest", token="{TOKEN}", node="vllm-node-1",
    announce={{"name": "standalone", "engine": "vllm", "model": "m"}},
    max_tokens=64, max_seqs=4, total_blocks=16)
sender.start()
delivered = sender.close(timeout=10)
heavy = sorted(m for m in ("app", "fastapi", "pydantic", "sqlalchemy", "engine", "vllm")
    if m in sys.modules)
import protocol
print(delivered, heavy, batchscope_vllm.__file__, protocol.__file__)
"""
    try:
        done = subprocess.run(
            [str(bin_dir / "python"), "-c", probe],
            cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        delivered, heavy, location, protocol_at = done.stdout.strip().split(" ", 3)
        assert (delivered, heavy) == ("True", "[]")
        assert location.startswith(str(tmp_path / "venv"))
        assert protocol_at.startswith(str(tmp_path / "venv"))
        nodes = httpx.get(live.url + "/api/nodes").json()
        assert [n["node"] for n in nodes] == ["vllm-node-1"]
    finally:
        server.should_exit = True
        thread.join(10)
    blocked = subprocess.run(
        [str(bin_dir / "python"), "-c", "import fastapi"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert blocked.returncode != 0  # nothing but websockets is there
