"""`batchscope export/import` and GET /api/sessions/{id}/export on real databases: the
files, the download, and the errors (unknown session: exit 2 / 404; bad file: exit 2)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from app.cli.main import main
from app.db import queries
from app.main import create_app
from app.records.export import export_jsonl
from app.settings import Settings
from tests.app.records.helpers import row_counts

Recorded = tuple[sessionmaker[Session], str]
TOKEN = "records-token-123"


def _url(sessions: sessionmaker[Session]) -> str:
    return str(sessions.kw["bind"].url.render_as_string(hide_password=False))


def run_cli(*argv: str) -> int:
    return main(list(argv))


def _jsonl(sessions: sessionmaker[Session], sid: str) -> str:
    out = io.StringIO()
    with sessions() as db:
        export_jsonl(db, sid, out)
    return out.getvalue()


def test_cli_export_then_import(
    recorded: Recorded,
    other_sessions: sessionmaker[Session],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sessions, sid = recorded
    out = tmp_path / "rec.jsonl"
    assert (
        run_cli(
            "export", sid, "--format", "jsonl", "--out", str(out), "--database-url", _url(sessions)
        )
        == 0
    )
    assert out.read_text(encoding="utf-8") == _jsonl(sessions, sid)
    capsys.readouterr()
    assert run_cli("export", sid, "--format", "jsonl", "--database-url", _url(sessions)) == 0
    assert capsys.readouterr().out == out.read_text(encoding="utf-8")
    assert run_cli("import", str(out), "--database-url", _url(other_sessions)) == 0
    assert sid in capsys.readouterr().out
    assert _jsonl(other_sessions, sid) == out.read_text(encoding="utf-8")
    assert run_cli("export", sid, "--format", "perfetto", "--database-url", _url(sessions)) == 0
    trace = json.loads(capsys.readouterr().out)
    assert any(e["name"] == "thread_name" for e in trace["traceEvents"])


@pytest.mark.parametrize("fmt", ["jsonl", "perfetto"])
def test_cli_unknown_session_is_exit_2(
    recorded: Recorded, fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sessions, _sid = recorded
    out = tmp_path / "never.json"
    code = run_cli(
        "export", "s-nope", "--format", fmt, "--out", str(out), "--database-url", _url(sessions)
    )
    assert code == 2
    assert "no recorded session 's-nope'" in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.iterdir())


def test_cli_malformed_import_is_exit_2_and_writes_nothing(
    recorded: Recorded,
    other_sessions: sessionmaker[Session],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sessions, sid = recorded
    lines = _jsonl(sessions, sid).splitlines()
    lines[-1] = lines[-1][:-1]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert run_cli("import", str(bad), "--database-url", _url(other_sessions)) == 2
    assert f"bad.jsonl: line {len(lines)}: not valid JSON" in capsys.readouterr().err
    assert set(row_counts(other_sessions).values()) == {0}
    assert (
        run_cli("import", str(tmp_path / "missing.jsonl"), "--database-url", _url(other_sessions))
        == 2
    )
    assert "cannot read" in capsys.readouterr().err


def _client(url: str, host: str = "127.0.0.1") -> TestClient:
    app = create_app(Settings(runner="sim", engine=False, database_url=url, token=TOKEN, host=host))
    return TestClient(app)


@pytest.fixture
def client(recorded: Recorded) -> Iterator[TestClient]:
    with _client(_url(recorded[0])) as c:
        yield c


def test_http_download_in_both_formats(recorded: Recorded, client: TestClient) -> None:
    sessions, sid = recorded
    r = client.get(f"/api/sessions/{sid}/export", params={"format": "jsonl"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    assert r.headers["content-disposition"] == f'attachment; filename="{sid}.jsonl"'
    assert r.text == _jsonl(sessions, sid)
    r = client.get(f"/api/sessions/{sid}/export?format=perfetto")
    assert r.status_code == 200
    assert r.headers["content-disposition"] == f'attachment; filename="{sid}.perfetto.json"'
    with sessions() as db:
        name = queries.get_session(db, sid)["name"]
    process = [e for e in r.json()["traceEvents"] if e["name"] == "process_name"]
    assert process[0]["args"]["name"] == name


def test_http_unknown_session_is_404_and_bad_format_422(client: TestClient) -> None:
    for fmt in ("jsonl", "perfetto"):
        r = client.get(f"/api/sessions/s-nope/export?format={fmt}")
        assert r.status_code == 404
        assert r.json() == {"detail": "no recorded session 's-nope'", "errors": []}
    assert client.get("/api/sessions/s-nope/export?format=csv").status_code == 422


def test_http_export_needs_the_token_off_loopback(recorded: Recorded) -> None:
    sessions, sid = recorded
    with _client(_url(sessions), host="0.0.0.0") as c:
        assert c.get(f"/api/sessions/{sid}/export").status_code == 401
        ok = c.get(f"/api/sessions/{sid}/export", headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200
