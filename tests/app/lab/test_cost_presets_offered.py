"""Cost-model presets offered where a what-if runs: the lab's form and a re-run's form list
them with their labels; one chosen is used (the step times are that preset's) and labelled
in the result (the sweep, its page and download; the re-run's answer and its compare)."""

from __future__ import annotations

import html
import json
import time
from pathlib import Path
from typing import Any

from app.lab.sources import workload_spec
from engine.runner.cost_model import RooflineCostModel, describe_cost_model, load_cost_model
from engine.runner.cost_presets import NIM_URL
from engine.sweep import SweepPoint, run_point
from tests.app.lab.test_lab_api import start, wait_for
from tests.conftest import LiveServer, cli, server_process

NIM = "h100x2-fp8:llama-3.1-70b"
WORKLOAD = "poisson:rate=50,n=20,prompt=64,output=16"


def test_a_preset_chosen_in_the_lab_is_used_and_labelled(live_server: LiveServer) -> None:
    label = describe_cost_model(NIM)["label"]
    with live_server.client() as c:
        offered = {m["key"]: m for m in c.get("/api/lab").json()["cost_models"]}
        assert offered[NIM]["label"] == label and NIM_URL in offered[NIM]["source"]
        page = c.get("/lab").text
        assert f'<option value="{NIM}"' in page and label in html.unescape(page)

        body = {"source": "workload", "workload": WORKLOAD, "seed": 3,
                "knob": "max_num_seqs", "values": "8", "cost_model": NIM}  # fmt: skip
        sweep = start(c, body)
        data = wait_for(c, sweep, lambda d: d["progress"]["finished"])
        assert data["status"] == "done", data
        assert data["cost_model"] == NIM
        assert data["cost_model_info"]["label"] == label
        assert NIM_URL in data["cost_model_info"]["source"]
        page = c.get(f"/lab/sweeps/{sweep}").text
        assert label in html.unescape(page) and NIM_URL in page
        download = c.get(f"/api/lab/sweeps/{sweep}/download?format=json").json()
        assert download["cost_model_info"]["label"] == label

    # Used: the run's figures are those of the same point on that preset, not the default.
    base = workload_spec(WORKLOAD, 3)
    point = SweepPoint(0, {"max_num_seqs": 8}, 0)
    with_preset = run_point(base, point, "sim", NIM).metrics
    assert data["points"][0]["metrics"] == with_preset
    assert run_point(base, point, "sim", None).metrics != with_preset


def _recorded(c: Any, n: int) -> str:
    """The session of the loaded scenario once its n requests finished and are recorded."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = c.get("/api/state").json()
        if sum(1 for r in state["requests"] if r["status"] == "FINISHED") >= n:
            sid: str = state["session"]
            r = c.get(f"/api/sessions/{sid}")
            if r.status_code == 200 and r.json()["requests"] == n:
                return sid
        time.sleep(0.1)
    raise AssertionError("the scenario was not recorded")


def _durations(c: Any, session: str) -> list[tuple[float, list[tuple[int, int]]]]:
    """(duration ms, chunks (start, n)) of every step that scheduled tokens."""
    text = c.get(f"/api/sessions/{session}/export", params={"format": "jsonl"}).text
    out = []
    for line in text.splitlines():
        frame = json.loads(line)
        if frame.get("type") != "iteration":
            continue
        data = frame["data"]
        chunks = [(m["start"], m["n"]) for m in data["scheduled"]]
        if chunks:
            out.append((data["duration"] * 1000.0, chunks))
    return out


def test_a_preset_chosen_for_a_rerun_is_used_and_labelled(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    cli("db", "upgrade", "--database-url", url, check=True)
    label = describe_cost_model(NIM)["label"]
    model = load_cost_model(NIM)
    assert isinstance(model, RooflineCostModel)
    with server_process(database_url=url) as live, live.client() as c:
        assert c.post("/api/scenarios/long_prompt_vs_decodes/load").status_code == 200
        original = _recorded(c, 9)
        replay = c.get("/", params={"session": original}).text
        assert 'name="cost_model"' in replay and f'<option value="{NIM}"' in replay
        assert label in html.unescape(replay)

        r = c.post(f"/api/sessions/{original}/rerun", json={"runner": "sim", "cost_model": NIM})
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["cost_model"] == NIM and out["cost_model_label"] == label
        rerun = out["session"]
        # Used: every step's time is the preset's estimate of that step.
        steps = _durations(c, rerun)
        assert steps
        for duration, chunks in steps:
            assert abs(duration - model.chunks_ms(chunks)) < 1e-3, (duration, chunks)
        plain = c.post(f"/api/sessions/{original}/rerun", json={"runner": "sim"}).json()
        assert plain["cost_model"] is None
        assert [d for d, _ in _durations(c, plain["session"])] != [d for d, _ in steps]
        # Labelled: the compare's setup says which cost model timed each side.
        setup = c.get("/api/compare", params={"a": plain["session"], "b": rerun}).json()
        clock = next(row for row in setup["setup"]["rows"] if row["key"] == "clock")
        assert label in clock["b"] and clock["differs"]

        # Refused with a reason: another runner, an unknown preset, a server file.
        for body, why in (
            ({"runner": "recorded", "cost_model": NIM}, "for runner sim only"),
            ({"runner": "torch", "cost_model": NIM}, "for runner sim only"),
            ({"runner": "sim", "cost_model": "h100:nope"}, "unknown preset"),
            ({"runner": "sim", "cost_model": "/etc/passwd"}, "unknown preset"),
        ):
            bad = c.post(f"/api/sessions/{original}/rerun", json=body)
            assert bad.status_code == 422 and why in bad.text, bad.text
