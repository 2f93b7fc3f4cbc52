"""The trace bench's own parts: the generated trace has the production shape it claims,
a measured child is timed, its peak RSS read, and stopped at its limit, and a recording
goes into a fresh database (a PostgreSQL one dropped after)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from bench.trace_bench import ROOT, Side, _finished, recording_database, run_child, write_trace


def test_the_generated_trace_has_the_shape_it_claims(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_trace(path, 10_000, 3600.0, 131_072, seed=0)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 10_000
    stamps = [r["timestamp"] for r in rows]
    assert stamps == sorted(stamps) and stamps[0] >= 0 and stamps[-1] <= 3_700_000
    lengths = [r["input_length"] for r in rows]
    assert max(lengths) <= 131_072 and min(lengths) >= 64
    assert sum(n >= 100_000 for n in lengths) >= 100  # 100k-token prompts, many of them
    for r in rows:
        assert len(r["hash_ids"]) == math.ceil(r["input_length"] / 512)
        assert 1 <= r["output_length"] <= 1024
    # Shared prefixes: many requests open with the same first block.
    firsts: dict[int, int] = {}
    for r in rows:
        firsts[r["hash_ids"][0]] = firsts.get(r["hash_ids"][0], 0) + 1
    assert max(firsts.values()) >= 50 and len(firsts) > 3_000


def test_a_child_is_timed_measured_and_stopped_at_its_limit(tmp_path: Path) -> None:
    grow = "b = bytearray(200 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096])"
    run = run_child([sys.executable, "-c", grow], tmp_path, {}, 60)
    assert run.rc == 0 and run.max_rss_mb >= 200
    stopped = run_child([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path, {}, 1)
    assert stopped.rc is None and 1 <= stopped.wall_s < 30


def test_finished_counts_every_reason() -> None:
    text = (
        '# HELP x\nvllm:request_success_total{finished_reason="length"} 7.0\n'
        'vllm:request_success_total{finished_reason="abort"} 2.0\n'
        'vllm:num_requests_running{engine="local"} 3.0\n'
    )
    assert _finished(text) == 9


def test_a_recording_database_is_fresh_and_a_postgres_one_is_dropped_after(
    tmp_path: Path, pg_url: str
) -> None:
    import psycopg

    side = Side("this", ROOT)
    with recording_database(side, tmp_path, None) as url:
        assert url == f"sqlite:///{tmp_path / 'this-rec.db'}"
    admin = pg_url.rsplit("/", 1)[0] + "/postgres"
    with recording_database(side, tmp_path, admin) as url:
        name = url.rsplit("/", 1)[1]
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == (name,)
            tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            assert tables.fetchone() == (0,)  # empty: the bench migrates it
    with psycopg.connect(admin) as conn:
        left = conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,))
        assert left.fetchone() == (0,)
