"""Response shapes written once: the HTTP API answers with the TypedDicts its code builds
(protocol.views, app.records' typed rows) and documents them from the same classes.

pydantic reads only typing_extensions' TypedDicts on Python 3.11, and protocol/ imports
nothing outside the standard library; so `shape(td)` builds pydantic's copy of a TypedDict
from the class itself (nested TypedDicts too): the same keys, the same required keys,
the same types, and each key's attribute docstring as its description in /docs. Nothing
is written twice: a key added to the TypedDict is in the answer and the docs at once.
"""

from __future__ import annotations

import ast
import inspect
import sys
import types
import typing
from functools import cache
from typing import Annotated, Any, NotRequired, Required, get_args, get_origin, get_type_hints

import typing_extensions
from pydantic import ConfigDict, Field


def shape(td: Any, *, extra: bool = False) -> Any:
    """`td` (a TypedDict) as a response model. `extra`: keys beyond its own pass through,
    in it and in the TypedDicts it holds (rows a route extends, as a recording's
    `arrival_seq`; a step's waiting detail as its producer wrote it)."""
    return _shape(td, extra)


def shape_list(td: Any, *, extra: bool = False) -> Any:
    """A list of `td`'s shape (`shape`), as a response model."""
    return types.GenericAlias(list, (_shape(td, extra),))


@cache
def _shape(td: Any, extra: bool) -> Any:
    docs = _attribute_docs(td)
    required = td.__required_keys__
    fields: dict[str, Any] = {}
    for key, tp in get_type_hints(td).items():
        tp = _convert(tp, extra)
        if key in docs:
            tp = Annotated[tp, Field(description=docs[key])]
        fields[key] = Required[tp] if key in required else NotRequired[tp]
    make: Any = typing_extensions.TypedDict  # a class built from a run-time name and keys
    made: Any = make(td.__name__.lstrip("_"), fields)
    made.__doc__ = td.__doc__
    made.__module__ = td.__module__
    made.__pydantic_config__ = ConfigDict(extra="allow" if extra else "ignore")
    return made


def _convert(tp: Any, extra: bool) -> Any:
    """`tp` with every TypedDict in it replaced by its shape."""
    if typing_extensions.is_typeddict(tp):
        return _shape(tp, extra)
    origin, args = get_origin(tp), get_args(tp)
    if not args:
        return tp
    converted = tuple(a if a is Ellipsis else _convert(a, extra) for a in args)
    if origin in (typing.Union, types.UnionType):
        return typing.Union[converted]  # noqa: UP007 (built from a tuple)
    if origin is typing.Annotated:
        return Annotated[(converted[0], *args[1:])]
    return origin[converted if len(converted) > 1 else converted[0]]


def _attribute_docs(td: Any) -> dict[str, str]:
    """The docstrings under `td`'s keys and its TypedDict bases' keys (by source)."""
    classes = _module_classes(td.__module__)
    docs: dict[str, str] = {}
    pending = [td.__name__]
    while pending:
        name = pending.pop()
        found = classes.get(name)
        if found is None:
            continue
        bases, own = found
        docs = {**own, **docs}
        pending += bases
    return docs


@cache
def _module_classes(module: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Each class of `module`: its base names and its keys' attribute docstrings."""
    try:
        tree = ast.parse(inspect.getsource(sys.modules[module]))
    except (OSError, TypeError):
        return {}
    out: dict[str, tuple[list[str], dict[str, str]]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
        docs: dict[str, str] = {}
        for stmt, after in zip(node.body, node.body[1:], strict=False):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[stmt.target.id] = inspect.cleandoc(after.value.value)
        out[node.name] = (bases, docs)
    return out
