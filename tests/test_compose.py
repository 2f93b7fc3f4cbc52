"""docker-compose.yml and the Dockerfile wire db + app as documented, and the app's command
line (migrations, then serve, DATABASE_URL on PostgreSQL) really works: it is run here,
verbatim, against the local PostgreSQL server (Docker itself is not needed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml  # type: ignore[import-untyped]
from packaging.requirements import Requirement

from tests.app.records.conftest import PG_ADMIN, PostgresDatabases, _pg_unreachable
from tests.conftest import ROOT, TOKEN, free_port
from tests.lifeline import die_with_us

UPGRADE, SERVE = "batchscope db upgrade", "batchscope serve --host 0.0.0.0"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def _app_command(compose: dict[str, Any]) -> str:
    command = compose["services"]["app"]["command"]
    assert command[:2] == ["sh", "-c"]
    return str(command[2])


def test_compose_wires_db_and_app(compose: dict[str, Any]) -> None:
    db, app = compose["services"]["db"], compose["services"]["app"]
    assert db["image"] == "postgres:16"
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    volume = db["volumes"][0].split(":")[0]
    assert volume in compose["volumes"] and db["volumes"][0].endswith("/var/lib/postgresql/data")
    assert app["build"] == "."
    assert app["depends_on"] == {"db": {"condition": "service_healthy"}}
    url = urlsplit(app["environment"]["DATABASE_URL"])
    assert url.scheme == "postgresql" and url.hostname == "db" and url.port == 5432
    assert url.password == db["environment"]["POSTGRES_PASSWORD"]
    assert url.path == "/" + db["environment"]["POSTGRES_DB"]
    command = _app_command(compose)
    assert command.index(UPGRADE) < command.index(SERVE) and "&&" in command
    assert "/healthz" in " ".join(app["healthcheck"]["test"])
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert dockerfile.startswith("#") and "\nFROM python:3.11-slim\n" in dockerfile
    assert "pip install -r requirements/runtime.txt" in dockerfile
    assert "lock.txt" not in dockerfile  # the dev lock (pytest, mypy, playwright...) stays out
    assert "torch==2.13.0" in dockerfile
    healthcheck = next(line for line in dockerfile.splitlines() if line.startswith("HEALTHCHECK"))
    assert "--interval=" in healthcheck and "/healthz" in dockerfile.split("HEALTHCHECK", 1)[1]


def _batchscope_on_path(tmp_path: Path) -> str:
    """A PATH where `batchscope` runs this checkout's CLI (the entry point if installed)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if shutil.which("batchscope", path=str(Path(sys.executable).parent)) is None:
        shim = bin_dir / "batchscope"
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m app.cli "$@"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    return os.pathsep.join(
        [str(bin_dir), str(Path(sys.executable).parent), os.environ.get("PATH", "")]
    )


def _sessions(env: dict[str, str]) -> list[dict[str, Any]]:
    done = subprocess.run(
        ["batchscope", "sessions", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


def test_compose_command_records_into_postgresql(compose: dict[str, Any], tmp_path: Path) -> None:
    if (reason := _pg_unreachable()) is not None:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    databases = PostgresDatabases()
    compose_url = urlsplit(compose["services"]["app"]["environment"]["DATABASE_URL"])
    try:
        name = databases.create_empty()
        admin = urlsplit(PG_ADMIN)
        # Compose's URL (user and password included), pointed at the local server.
        url = compose_url._replace(
            netloc=f"{compose_url.username}:{compose_url.password}@{admin.hostname}:{admin.port}",
            path=f"/{name}",
        ).geturl()
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "PATH": _batchscope_on_path(tmp_path),
            "BATCHSCOPE_TOKEN": TOKEN,
        }
        port = free_port()
        command = f"{_app_command(compose)} --port {port} --runner sim --workload poisson"
        proc = subprocess.Popen(
            ["sh", "-c", command],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=die_with_us(),
        )
        try:
            deadline = time.monotonic() + 60
            recorded: list[dict[str, Any]] = []
            while not recorded:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "no recording appeared"
                time.sleep(0.5)
                try:
                    health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).json()
                except httpx.HTTPError:
                    continue
                assert health["status"] == "ok", health
                if health["checks"]["recorder"]["info"]["written"] == 0:
                    continue
                recorded = [r for r in _sessions(env) if r["steps"] > 0 and r["requests"] > 0]
        finally:
            proc.terminate()  # `exec`: the signal reaches the server itself
            output = proc.communicate(timeout=30)[0]
        # uvicorn shuts down gracefully, then re-raises the SIGTERM it caught.
        assert proc.returncode in (0, -signal.SIGTERM), output
        assert "at revision" in output  # the upgrade ran first
        rows = _sessions(env)
        assert [r["id"] for r in rows] == [recorded[0]["id"]]
        assert rows[0]["source"] == "local" and rows[0]["ended_at"] is not None
        assert rows[0]["steps"] >= recorded[0]["steps"]
    finally:
        databases.drop_all()


def _requirement_names(text: str) -> dict[str, str]:
    pins = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def test_runtime_lock_is_the_runtime_closure_pinned_as_in_the_dev_lock() -> None:
    """requirements/runtime.txt (the Docker image's) = what batchscope, its torch and
    postgres extras need, transitively, at the versions lock.txt pins; nothing else."""
    runtime = _requirement_names((ROOT / "requirements" / "runtime.txt").read_text())
    lock = _requirement_names((ROOT / "requirements" / "lock.txt").read_text())
    assert {name: lock.get(name) for name in runtime} == runtime
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    roots = [*project["dependencies"], *extras["torch"], *extras["postgres"]]
    closure: set[str] = set()
    stack = [Requirement(r) for r in roots]
    while stack:
        req = stack.pop()
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        wanted = tuple(sorted(req.extras))
        if (name, wanted) in closure:
            continue
        closure.add((name, wanted))  # type: ignore[arg-type]
        for spec in metadata.requires(req.name) or []:
            dep = Requirement(spec)
            extras_on = list(req.extras) or [""]
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in extras_on):
                stack.append(dep)
    assert set(runtime) == {name for name, _ in closure}
    for tool in ("pytest", "mypy", "ruff", "playwright", "transformers", "hypothesis"):
        assert tool not in runtime
