"""The pydantic validators (ingest, import, the HTTP API's response models) have the same
field trees as protocol.wire's TypedDicts, which every producer builds and reader reads:
a key added, renamed or made optional on one side only fails here."""

from __future__ import annotations

import types
import typing
from typing import Any, Union, get_args, get_origin, get_type_hints

import pytest
from pydantic import BaseModel
from typing_extensions import is_typeddict

from app import api_models, compare_models, life_models
from app.frames import validate
from app.records import compare_types, life_types
from protocol import views, wire

Tree = dict[str, tuple[bool, Any]]
"""key -> (required, subtree or None)."""


def _inner(tp: Any) -> Any:
    """The model or TypedDict a field holds (directly, in a list or optional), or None."""
    origin = get_origin(tp)
    if origin in (list, Union, types.UnionType, typing.Annotated):
        found = [_inner(a) for a in get_args(tp) if a is not type(None)]
        found = [f for f in found if f is not None]
        return found[0] if len(found) == 1 else None
    if is_typeddict(tp) or (isinstance(tp, type) and issubclass(tp, BaseModel)):
        return tp
    return None


def tree(tp: Any) -> Tree:
    if is_typeddict(tp):
        hints = get_type_hints(tp)
        return {
            k: (k in tp.__required_keys__, _sub(hints[k]))
            for k in hints  # type: ignore[attr-defined]
        }
    return {
        name: (field.is_required(), _sub(field.annotation))
        for name, field in tp.model_fields.items()
    }


def _sub(tp: Any) -> Tree | None:
    inner = _inner(tp)
    return None if inner is None else tree(inner)


def same(a: Tree, b: Tree, path: str = "") -> list[str]:
    problems = [f"{path}{k}: only in the wire type" for k in a.keys() - b.keys()]
    problems += [f"{path}{k}: only in the model" for k in b.keys() - a.keys()]
    for k in a.keys() & b.keys():
        (req_a, sub_a), (req_b, sub_b) = a[k], b[k]
        if req_a != req_b:
            problems.append(f"{path}{k}: required {req_a} in the wire type, {req_b} in the model")
        if sub_a is not None and sub_b is not None:
            problems += same(sub_a, sub_b, f"{path}{k}.")
    return problems


PAIRS = [
    (wire.IterationData, validate.IterationFrame),
    (wire.ScheduledRow, validate.ScheduledItem),  # `scheduled` may be pre-encoded text
    (wire.PreemptedRow, validate.PreemptedItem),
    (wire.ReqReason, validate.ReqReason),
    (wire.Queues, validate.Queues),
    (wire.Budget, validate.Budget),
    (wire.KVUse, validate.KVFrame),
    (wire.RequestMarkData, validate.RequestFrame),
    (wire.RequestDetail, validate.RequestDetail),
    (wire.ConfigData, validate.ConfigFrame),
    (wire.SessionData, validate.SessionFrame),
]


@pytest.mark.parametrize(("typed", "model"), PAIRS, ids=[m.__name__ for _, m in PAIRS])
def test_the_validator_has_the_wire_types_fields(typed: Any, model: type[BaseModel]) -> None:
    assert same(tree(typed), tree(model)) == []


def test_the_envelope_and_the_frame_types() -> None:
    assert tree(wire.Envelope).keys() == tree(validate.Envelope).keys()
    assert set(validate.FRAME_MODELS) == {"iteration", "request", "config", "session"}


def test_the_apis_snapshot_and_table_row_are_the_wire_types() -> None:
    # The replay socket adds `replay`; a snapshot over HTTP always has its blocks.
    assert tree(views.SnapshotData).keys() - {"replay"} == tree(api_models.Snapshot).keys()
    assert set(api_models.RequestRow.model_fields) == set(get_type_hints(views.TableRow))
    assert set(get_type_hints(views.TableRow)) - set(views.ROW_COLUMNS) == {
        "ttft", "itl", "e2e", "num_output_tokens", "phase", "waiting_text"
    }  # fmt: skip


SNAPSHOT_PAIRS = [
    (wire.SessionMeta, api_models.SessionMeta),
    (views.ConfigMark, api_models.ConfigMark),
    (views.StepSummary, api_models.StepSummary),
]


@pytest.mark.parametrize(
    ("typed", "model"), SNAPSHOT_PAIRS, ids=[m.__name__ for _, m in SNAPSHOT_PAIRS]
)
def test_a_snapshots_parts_are_the_models(typed: Any, model: type[BaseModel]) -> None:
    assert same(tree(typed), tree(model)) == []


COMPARE_PAIRS = [
    (compare_types.SessionSummary, compare_models.SessionSummary),
    (compare_types.ComparisonData, compare_models.Comparison),
    (compare_types.SetupData, compare_models.SetupData),
    (compare_types.SetupRow, compare_models.SetupRow),
    (compare_types.StepLine, compare_models.StepLine),
    (compare_types.Side, compare_models.Side),
    (compare_types.ReleaseChangeRow, compare_models.ReleaseChange),
    (compare_types.FirstDifferenceData, compare_models.FirstDifference),
]


@pytest.mark.parametrize(
    ("typed", "model"), COMPARE_PAIRS, ids=[m.__name__ for _, m in COMPARE_PAIRS]
)
def test_a_comparisons_parts_are_the_models(typed: Any, model: type[BaseModel]) -> None:
    assert same(tree(typed), tree(model)) == []


def _keys(model: type[BaseModel]) -> set[str]:
    return {f.alias or name for name, f in model.model_fields.items()}


LIFE_PAIRS = [
    (life_types.ScheduledStep, life_models.ScheduledStep),
    (life_types.WaitSpan, life_models.WaitSpan),
    (life_types.Preemption, life_models.Preemption),
    (life_types.Output, life_models.Output),
    (life_types.HeldBlock, life_models.HeldBlock),
    (life_types.Latency, life_models.Latency),
]


@pytest.mark.parametrize(("typed", "model"), LIFE_PAIRS, ids=[m.__name__ for _, m in LIFE_PAIRS])
def test_a_request_lifes_parts_are_the_models(typed: Any, model: type[BaseModel]) -> None:
    assert set(get_type_hints(typed)) == _keys(model)


def test_a_difference_is_found() -> None:
    class Wider(wire.Queues, total=False):
        extra: int

    assert same(tree(Wider), tree(validate.Queues)) == ["extra: only in the wire type"]
