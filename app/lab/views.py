"""The data behind the lab's pages, shared with their JSON twins (the routes only pick
the template): the overview (/lab) and one sweep (/lab/sweeps/ID)."""

from __future__ import annotations

from typing import cast
from urllib.parse import quote

from typing_extensions import TypedDict

from app.lab.catalog import SUMMARY, Metric, metric_catalog
from app.lab.experiments import Chart, ExperimentSummary, experiments, get_experiment
from app.lab.store import PointRow, SweepDetail, SweepRow
from app.nodes.scenarios import list_scenario_names
from engine.runner.cost_model import PresetInfo, describe_cost_model, preset_catalog
from engine.sweep import SWEEPABLE

FINISHED = ("done", "incomplete", "cancelled", "interrupted", "failed")
# Values the form suggests when a knob is picked (any list can be typed instead).
SUGGESTED = {
    "max_num_batched_tokens": "256,512,1024,2048,4096",
    "max_num_seqs": "4,8,16,32,64",
    "long_prefill_token_threshold": "0,64,128,256,512",
    "num_gpu_blocks": "100,200,400,800",
    "kv_block_limit": "0,50,100,200",
    "enable_chunked_prefill": "true,false",
    "enable_prefix_caching": "true,false",
    "scheduler_reserve_full_isl": "true,false",
    "async_scheduling": "false,true",
    "num_speculative_tokens": "0,1,2,3,4,5,6",
    "batching": "continuous,static",
    "policy": "fcfs,priority",
}


class Progress(TypedDict):
    done: int
    total: int
    percent: float
    finished: bool


class ListedSweep(SweepRow):
    href: str
    progress: Progress


class Overview(TypedDict):
    experiments: list[ExperimentSummary]
    sweeps: list[ListedSweep]
    scenarios: list[str]
    knobs: list[str]
    suggested_values: dict[str, str]
    cost_models: list[PresetInfo]
    """Every cost-model preset, labelled with its source (published pairs first)."""
    metrics: list[Metric]
    worker: dict[str, object]


class SweepLinks(TypedDict):
    api: str
    csv: str
    json: str


class SweepView(ListedSweep):
    """A sweep without its base scenario, with its experiment and what its page shows."""

    points: list[PointRow]
    experiment_info: ExperimentSummary | None
    chart: Chart
    knob_names: list[str]
    summary_columns: list[str]
    metrics: list[Metric]
    links: SweepLinks
    cost_model_info: PresetInfo | None
    """The sweep's cost model labelled with its source (None: the default linear one)."""


def cost_model_info(spec: str | None) -> PresetInfo | None:
    """A stored sweep's cost model with its label and source; one no longer loadable
    (a file since removed, a preset since renamed) says so instead of failing the page."""
    if not spec:
        return None
    try:
        return describe_cost_model(spec)
    except ValueError as exc:
        return {
            "key": spec,
            "label": spec,
            "source": f"not loadable now: {exc}",
            "published": False,
        }


def sweep_href(sweep_id: str) -> str:
    return "/lab/sweeps/" + quote(sweep_id, safe="")


def progress(row: SweepRow) -> Progress:
    total = max(1, row["num_points"])
    return {
        "done": row["num_done"],
        "total": row["num_points"],
        "percent": round(100.0 * row["num_done"] / total, 1),
        "finished": row["status"] in FINISHED,
    }


def list_view(rows: list[SweepRow]) -> list[ListedSweep]:
    return [{**r, "href": sweep_href(r["id"]), "progress": progress(r)} for r in rows]


def overview(rows: list[SweepRow], worker_status: dict[str, object]) -> Overview:
    """/lab and /api/lab: the experiments, the form's choices and the stored sweeps."""
    return {
        "experiments": [e.summary() for e in experiments()],
        "sweeps": list_view(rows),
        "scenarios": list_scenario_names(),
        "knobs": SWEEPABLE,
        "suggested_values": SUGGESTED,
        "cost_models": preset_catalog(),
        "metrics": metric_catalog(),
        "worker": worker_status,
    }


def sweep_view(sweep: SweepDetail) -> SweepView:
    """/lab/sweeps/ID and its twin: the sweep (not its base scenario), its experiment's
    explanation and chart, and where to download it."""
    experiment = None
    if sweep["experiment"]:
        try:
            experiment = get_experiment(sweep["experiment"]).summary()
        except LookupError:
            experiment = None  # an experiment no longer shipped: the sweep stays readable
    api = "/api/lab/sweeps/" + quote(sweep["id"], safe="")
    chart: Chart = {**experiment["chart"]} if experiment else {}
    chart.setdefault("metric", "ttft")
    chart.setdefault("percentile", "p50")
    row = cast(SweepRow, {k: v for k, v in sweep.items() if k not in ("base", "points")})
    return {
        **row,
        "href": sweep_href(sweep["id"]),
        "progress": progress(sweep),
        "points": sweep["points"],
        "experiment_info": experiment,
        "chart": chart,
        "knob_names": [k["name"] for k in sweep["knobs"]],
        "summary_columns": list(SUMMARY),
        "metrics": metric_catalog(),
        "cost_model_info": cost_model_info(sweep["cost_model"]),
        "links": {
            "api": api,
            "csv": api + "/download?format=csv",
            "json": api + "/download?format=json",
        },
    }
