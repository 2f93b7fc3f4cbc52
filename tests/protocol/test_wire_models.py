"""The pydantic validators (ingest, import) have the same field trees as protocol.wire's
TypedDicts, which every producer builds and reader reads: a key added, renamed or made
optional on one side only fails here. The HTTP API's response models are those TypedDicts
themselves (app.api_shapes.shape): equal by construction, checked here once."""

from __future__ import annotations

import types
import typing
from typing import Any, Union, get_args, get_origin, get_type_hints

import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError
from typing_extensions import is_typeddict

from app.api_shapes import shape, shape_list
from app.db.models import RequestRecord
from app.db.request_rows import done_row
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


def test_the_apis_table_row_is_the_folds_row_without_segments() -> None:
    # One request row: the table's (the API's answer) has the fold's keys but segments,
    # plus what the table derives.
    assert set(get_type_hints(views.TableRow)) - set(views.ROW_COLUMNS) == {
        "ttft", "itl", "e2e", "num_output_tokens", "phase", "waiting_text"
    }  # fmt: skip
    columns = [c for c in views.ROW_COLUMNS if c != "segments"]
    assert list(get_type_hints(views.TableRow))[: len(columns)] == columns  # in column order


def test_a_recordings_done_row_has_the_table_rows_keys() -> None:
    record = RequestRecord(
        session_id="s", req_id="r1", arrival_step=None, arrival_t=None, num_prompt_tokens=4,
        max_tokens=2, priority=0, first_scheduled_step=0, first_token_t=0.5, finish_step=2,
        finish_t=1.0, finish_reason="length", num_preemptions=0, prefix_hit_tokens=0,
        num_output_tokens=2, arrival_seq=1, status="FINISHED", ttft=0.5, e2e=1.0,
    )  # fmt: skip
    row = done_row(record)
    assert set(row) - {"arrival_seq"} == set(get_type_hints(views.TableRow))
    # What a recording does not keep is answered as null, and the API's shape takes it.
    assert row["num_draft_tokens"] is None and row["arrived_step"] is None
    answered = TypeAdapter(shape_list(views.TableRow, extra=True)).validate_python([row])
    assert answered[0]["arrival_seq"] == 1 and answered[0]["placeholders"] is None


SHAPED = [
    views.SnapshotData,
    views.LatencySummary,
    views.TableRow,
    life_types.RequestLifeData,
    life_types.BlockMapData,
    compare_types.ComparisonData,
    compare_types.FirstDifferenceData,
]


@pytest.mark.parametrize("typed", SHAPED, ids=[t.__name__ for t in SHAPED])
def test_a_response_shape_is_its_typeddict(typed: Any) -> None:
    """Built from the class: the same keys, the same required keys, nested ones too."""
    assert same(tree(typed), tree(shape(typed))) == []


def test_a_shape_documents_its_keys_and_keeps_or_drops_extra_keys() -> None:
    schema = TypeAdapter(shape(views.SnapshotData)).json_schema()
    left_out = schema["$defs"]["LeftOut"]["properties"]
    assert left_out["from_step"]["description"] == "The first step its history holds."
    summary = {"p50": 1, "p95": None, "p99": 2.5, "mine": 1}
    assert TypeAdapter(shape(views.Quantiles)).validate_python(summary) == {
        "p50": 1, "p95": None, "p99": 2.5
    }  # fmt: skip
    assert TypeAdapter(shape(views.Quantiles, extra=True)).validate_python(summary) == summary
    with pytest.raises(ValidationError):
        TypeAdapter(shape(views.Quantiles)).validate_python({"p50": 1})


def test_a_difference_is_found() -> None:
    class Wider(wire.Queues, total=False):
        extra: int

    assert same(tree(Wider), tree(validate.Queues)) == ["extra: only in the wire type"]
