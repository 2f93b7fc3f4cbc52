"""Two recordings compared: GET /api/compare?a=&b= (summaries and B - A), GET
/api/compare/first-difference?a=&b= (the first step whose plans differ, and the release
change that explains it), POST /api/compare/releases (one trace recorded under two vLLM
releases) and the page, /compare?a=&b= (two Gantts with the first difference marked, the
steps around it, the summary table with a verdict per metric, the knobs)."""

from __future__ import annotations

import asyncio
from typing import Annotated, TypedDict, cast
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, Response

from app.api_bodies import ReleasePairBody, body_doc
from app.api_docs import CONTROL_ERRORS, error_responses
from app.api_models import ReleasePair
from app.api_shapes import shape
from app.deps import Control, DbDep, HubDep, RecorderDep, View, json_or_form, not_found_page
from app.nodes.scenarios import load_named_scenario
from app.records.compare import compare_sessions
from app.records.compare_types import ComparisonData, FirstDifferenceData
from app.records.first_difference import WALK_MAX_STEPS, first_difference
from app.records.release_pair import PairError, scenario_pair, session_pair
from app.records.rerun_process import RerunFailed
from app.templating import templates
from protocol.wire import Knobs, KnobValue

router = APIRouter(dependencies=View)
PairDep = Annotated[ReleasePairBody, Depends(json_or_form(ReleasePairBody))]


class ReleasePairData(TypedDict):
    """Two sessions of one trace, recorded as two releases (app.api_models.ReleasePair)."""

    a: str
    b: str
    href: str
    message: str


# (key, label, kind, direction): kind picks the formatting; direction +1 = higher is
# better, -1 = lower is better, 0 = neither.
METRICS = (
    ("throughput_tok_s", "throughput (output tok/s)", "rate", 1),
    ("ttft_p50", "TTFT p50", "ms", -1),
    ("ttft_p99", "TTFT p99", "ms", -1),
    ("itl_p50", "ITL p50", "ms", -1),
    ("itl_p99", "ITL p99", "ms", -1),
    ("e2e_p50", "E2E p50", "ms", -1),
    ("e2e_p99", "E2E p99", "ms", -1),
    ("preemptions", "preemptions", "int", -1),
    ("kv_peak", "KV peak (blocks)", "int", 0),
    ("steps", "steps", "int", -1),
    ("finished", "finished", "int", 1),
)


@router.get(
    "/api/compare",
    response_model=shape(ComparisonData),
    tags=["sessions"],
    responses=error_responses(401, 404),
    summary="Compare two recordings",
)
async def compare(a: str, b: str, db: DbDep) -> ComparisonData:
    return await compare_sessions(db, a, b)


async def _first_difference(db: DbDep, a: str, b: str) -> FirstDifferenceData:
    def load() -> FirstDifferenceData:
        with db() as s:
            return first_difference(s, a, b, load_named_scenario)

    return await asyncio.to_thread(load)


@router.get(
    "/api/compare/first-difference",
    response_model=shape(FirstDifferenceData),
    response_model_exclude_unset=True,
    tags=["sessions"],
    responses=error_responses(401, 404),
    summary="The first step at which two recordings differ, and the release change behind it",
)
async def first_difference_api(a: str, b: str, db: DbDep) -> FirstDifferenceData:
    return await _first_difference(db, a, b)


def compare_href(a: str, b: str) -> str:
    return "/compare?a=" + quote(a, safe="") + "&b=" + quote(b, safe="")


@router.post(
    "/api/compare/releases",
    response_model=ReleasePair,
    openapi_extra=body_doc(ReleasePairBody),
    dependencies=Control,
    tags=["sessions"],
    responses={**CONTROL_ERRORS, **error_responses(404)},
    summary="Record one trace under two vLLM releases, to compare",
)
async def release_pair(
    db: DbDep, hub: HubDep, recorder: RecorderDep, body: PairDep
) -> ReleasePairData:
    if (body.session is None) == (body.scenario is None):
        raise HTTPException(422, "give one of session (a recording) or scenario (a shipped one)")
    releases: list[str] = [body.a, body.b]
    try:
        if body.scenario is not None:
            try:
                scenario = load_named_scenario(body.scenario)
            except KeyError:
                raise HTTPException(404, f"no scenario named {body.scenario!r}") from None
            ids = await scenario_pair(hub, recorder, body.scenario, scenario, releases)
        else:
            if recorder is None:
                raise HTTPException(503, "the recorder is not running")
            ids = await session_pair(db, recorder, str(body.session), releases)
    except PairError as exc:
        raise HTTPException(422, str(exc)) from None
    except RerunFailed as exc:
        raise HTTPException(503, str(exc)) from None
    what = body.scenario or body.session
    return {
        "a": ids[0],
        "b": ids[1],
        "href": compare_href(ids[0], ids[1]),
        "message": f"{what} recorded as vLLM {body.a} ({ids[0]}) and vLLM {body.b} ({ids[1]})",
    }


class MetricRow(TypedDict):
    """A metric of the compare page's table: both sides, B - A and whether B is better."""

    key: str
    label: str
    kind: str
    a: object
    b: object
    diff: float | None
    verdict: str


class KnobRow(TypedDict):
    key: str
    a: KnobValue
    b: KnobValue
    differs: bool


def compare_rows(result: ComparisonData) -> list[MetricRow]:
    rows: list[MetricRow] = []
    a, b = cast(dict[str, object], result["a"]), cast(dict[str, object], result["b"])
    for key, label, kind, direction in METRICS:
        diff = result["diff"].get(key)
        verdict = ""
        if diff and direction:
            verdict = "better" if diff * direction > 0 else "worse"
        rows.append(
            {
                "key": key,
                "label": label,
                "kind": kind,
                "a": a.get(key),
                "b": b.get(key),
                "diff": diff,
                "verdict": verdict,
            }
        )
    return rows


def config_rows(a: Knobs, b: Knobs) -> list[KnobRow]:
    keys = sorted(set(a) | set(b))
    return [{"key": k, "a": a.get(k), "b": b.get(k), "differs": a.get(k) != b.get(k)} for k in keys]


@router.get("/compare", response_class=HTMLResponse, include_in_schema=False)
async def compare_page(request: Request, db: DbDep, a: str = "", b: str = "") -> Response:
    if not a or not b:
        return not_found_page(request, "compare needs two sessions: /compare?a=ID&b=ID")
    result = await compare_sessions(db, a, b)
    difference = await _first_difference(db, a, b)
    configs = config_rows(result["a"]["config"] or {}, result["b"]["config"] or {})
    return templates.TemplateResponse(
        request,
        "compare.html",
        {
            "a": result["a"],
            "b": result["b"],
            "metrics": compare_rows(result),
            "configs": configs,
            "setup": result["setup"],
            "config_diffs": sum(1 for c in configs if c["differs"]),
            "api_query": "?a=" + quote(a, safe="") + "&b=" + quote(b, safe=""),
            "fd": difference,
            "walk_limit": WALK_MAX_STEPS,
        },
    )
