"""`batchscope sweep`: deterministic, each run's figures equal to `batchscope simulate` of
that point + run_metrics, CSV export, one-message exit 2 on bad input, Ctrl-C keeps what
finished. The sweeps run as real `python -m app.cli` processes (spawn workers and all)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from app.cli.main import main
from engine.run_metrics import run_metrics
from engine.scenario import parse_scenario
from engine.sweep import SweepPoint, point_scenario
from tests.conftest import ROOT, cli
from tests.engine.test_sweep import BASE  # the engine sweep test's scenario
from tests.lifeline import die_with_us


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "base.json"
    path.write_text(json.dumps(BASE))
    return path


def sweep(scenario_file: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return cli(
        "sweep", str(scenario_file), "--knob", "max_num_batched_tokens=32,64,128",
        "--repeat", "2", "--workers", "2", "--out", str(out),
    )  # fmt: skip


def test_sweep_is_deterministic_and_each_run_equals_simulate(
    scenario_file: Path, tmp_path: Path
) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    for out in (first, second):
        done = sweep(scenario_file, out)
        assert done.returncode == 0, done.stderr
    a, b = json.loads(first.read_text()), json.loads(second.read_text())
    assert a["complete"] is True and len(a["points"]) == 6
    assert a["points"] == b["points"]  # identical figures, run after run
    assert "6/6 points" in done.stderr and "max_num_batched_tokens" in done.stdout

    for p in a["points"]:
        assert p["error"] is None
        point = SweepPoint(p["index"], p["knobs"], p["repeat"])
        data = point_scenario(BASE, point)
        path = tmp_path / f"point{p['index']}.json"
        path.write_text(json.dumps(data))
        result_path = tmp_path / f"result{p['index']}.json"
        assert main(["simulate", str(path), "--out", str(result_path)]) == 0
        result = json.loads(result_path.read_text())
        usable = parse_scenario(data).config.cache.num_usable_blocks
        assert p["metrics"] == run_metrics(result, usable)
    # The knob matters: a bigger budget finishes the same work in fewer steps.
    steps = [a["points"][i]["metrics"]["steps"] for i in (0, 2, 4)]
    assert steps[0] > steps[1] >= steps[2]


def test_csv_export_has_one_row_per_run_with_every_figure(
    scenario_file: Path, tmp_path: Path
) -> None:
    out_csv, out_json = tmp_path / "s.csv", tmp_path / "s.json"
    assert sweep(scenario_file, out_csv).returncode == 0
    assert main(["sweep", str(scenario_file), "--knob", "max_num_batched_tokens=32,64,128",
                 "--repeat", "2", "--workers", "1", "--out", str(out_json)]) == 0  # fmt: skip
    with out_csv.open() as fh:
        rows = list(csv.DictReader(fh))
    points = json.loads(out_json.read_text())["points"]
    assert len(rows) == 6
    assert list(rows[0])[:2] == ["max_num_batched_tokens", "repeat"]
    for row, p in zip(rows, points, strict=True):
        assert int(row["max_num_batched_tokens"]) == p["knobs"]["max_num_batched_tokens"]
        assert int(row["repeat"]) == p["repeat"]
        assert set(row) - {"max_num_batched_tokens", "repeat"} == set(p["metrics"])
        for key, value in p["metrics"].items():
            assert float(row[key]) == pytest.approx(value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--knob", "warp=1,2"], "not an engine knob"),
        (["--knob", "max_num_batched_tokens=64,4"], "max_num_batched_tokens (4)"),
        (["--knob", "max_num_seqs=2", "--out", "{tmp}/x.txt"], "must end in .json or .csv"),
        (["--knob", "max_num_seqs=2", "--cost-model", "b999:llama-3-8b"], "unknown GPU"),
        (["--knob", "max_num_seqs=2", "--repeat", "0"], "repeat"),
        (["--knob", "max_num_seqs=2", "--set", "max_num_seqs=1,2"], "one value"),
    ],
)
def test_bad_input_is_one_message_exit_2_and_nothing_written(
    scenario_file: Path,
    tmp_path: Path,
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "never.json"
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if "--out" not in args:
        args += ["--out", str(out)]
    assert main(["sweep", str(scenario_file), *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("batchscope: error:"), lines
    assert message in lines[0]
    assert list(tmp_path.iterdir()) == [scenario_file]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no-such-scenario", "--knob", "max_num_seqs=2"], "no such file"),
        (["--workload", "poisson:rate=0", "--knob", "max_num_seqs=2"], "rate"),
        (["--workload", "uniform:rate=1", "--knob", "max_num_seqs=2"], "expected poisson"),
        (["seed", "--workload", "poisson:rate=1", "--knob", "max_num_seqs=2"], "one source"),
        (["--experiment", "nope"], "no experiment"),
        (
            ["--session", "s-none", "--knob", "max_num_seqs=2", "--database-url", "sqlite://"],
            "run `batchscope db upgrade",
        ),
    ],
)
def test_bad_sources_are_refused(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sweep", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("batchscope: error:") and message in err, err


def test_ctrl_c_keeps_the_finished_runs_and_still_writes_out(tmp_path: Path) -> None:
    out = tmp_path / "partial.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "sweep", "--workload",
         "poisson:rate=30,n=40,prompt=256,output=128", "--knob",
         "num_gpu_blocks=100:1000:25", "--repeat", "2", "--workers", "2", "--out", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=die_with_us(),
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        # Progress lines come every tenth of the way (stderr is a pipe here).
        deadline = time.monotonic() + 60
        while "points" not in proc.stderr.readline():
            assert time.monotonic() < deadline and proc.poll() is None
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends
        rc = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    data: dict[str, Any] = json.loads(out.read_text())
    assert rc == 130
    assert data["complete"] is False
    assert 0 < len(data["points"]) < 74
    assert all(p["error"] is None and p["metrics"]["steps"] > 0 for p in data["points"])
