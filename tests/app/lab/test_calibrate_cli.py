"""`batchscope calibrate --roofline`: a roofline fitted on the torch runner, written as a
file that `--cost-model` (simulate, sweep, the lab) loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli.main import main
from engine.runner.cost_model import RooflineCostModel, load_cost_model

torch = pytest.importorskip("torch")


def test_calibrate_roofline_writes_a_loadable_cost_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.set_num_threads(1)  # tiny matmuls on a shared 2-core machine (tests/runner)
    out = tmp_path / "roof.json"
    args = ["calibrate", "--roofline", "--device", "cpu", "--repeats", "1", "--out", str(out)]
    assert main(args) == 0
    assert "knee at" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["kind"] == "roofline" and data["runner"]["model"]
    model = load_cost_model(str(out))
    assert isinstance(model, RooflineCostModel)
    assert model.peak_flops > 0 and model.bandwidth > 0 and model.launch_ms >= 0
    # Bigger steps cost more: the fit is usable by the SimRunner.
    assert model.chunks_ms([(0, 512)]) > model.chunks_ms([(0, 16)])
    scenario = Path(__file__).resolve().parents[3] / "scenarios" / "seed.json"
    assert main(["simulate", str(scenario), "--cost-model", str(out), "--out",
                 str(tmp_path / "r.json")]) == 0  # fmt: skip
