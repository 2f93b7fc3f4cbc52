"""No module hides an import cycle behind `if TYPE_CHECKING:` (STYLE R3).

A type-only import of a module that imports you means a class was cut into friend modules
(STYLE R1); import-linter skips type-only imports, so the AST is read here. engine/ and
app/ take no exceptions once app's session fold is one module; elsewhere an exception
names its reason.
"""

from __future__ import annotations

from pathlib import Path

from tests.import_graph import (
    ALL_KINDS,
    EXECUTED_KINDS,
    LAZY,
    RUNTIME,
    TYPE_ONLY,
    Edge,
    import_circles,
    import_edges,
    project_modules,
    type_only_back_references,
)

ALLOWED: dict[tuple[str, str], str] = {}
"""(importer, imported) -> why the type-only back-reference stays for now."""


def test_no_type_only_back_references_beyond_the_allow_list() -> None:
    back = type_only_back_references(import_edges())
    found = {(e.importer, e.imported) for e in back}
    unexpected = [
        f"{e.importer}:{e.line} -> {e.imported}"
        for e in back
        if (e.importer, e.imported) not in ALLOWED
    ]
    assert unexpected == [], "type-only imports of an importer (carve a noun instead)"
    assert set(ALLOWED) - found == set(), "allow-list entries that are gone: remove them"


def test_the_engine_takes_no_exception() -> None:
    assert [k for k in ALLOWED if k[0].startswith("engine.")] == []


def test_no_import_circles_once_the_allowed_back_references_are_cut() -> None:
    edges = [e for e in import_edges() if (e.importer, e.imported) not in ALLOWED]
    assert import_circles(edges, ALL_KINDS) == []


def test_no_module_of_the_engine_takes_the_scheduler_by_another_name() -> None:
    """The Scheduler's methods live in its class (R1): no free function takes it."""
    modules = project_modules()
    offenders = [
        name
        for name, path in modules.items()
        if name.startswith("engine.") and "sched: Scheduler" in path.read_text()
    ]
    assert offenders == []


def test_the_scan_finds_a_back_reference_and_its_circle(tmp_path: Path) -> None:
    """The scanner on a small tree: `owner` imports `helpers`, which imports `owner` only
    for the type checker; `lazy` imports `owner` inside a function."""
    files = {
        "pkg.owner": "from pkg.helpers import helper\n",
        "pkg.helpers": (
            "from __future__ import annotations\n"
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from pkg.owner import Owner\n"
            "def helper(o: Owner) -> None: ...\n"
        ),
        "pkg.lazy": "def f() -> None:\n    from . import owner\n",
    }
    modules = {}
    for name, text in files.items():
        path = tmp_path / f"{name.replace('.', '_')}.py"
        path.write_text(text)
        modules[name] = path
    edges = import_edges(modules)
    assert set(edges) == {
        Edge("pkg.owner", "pkg.helpers", RUNTIME, 1),
        Edge("pkg.helpers", "pkg.owner", TYPE_ONLY, 4),
        Edge("pkg.lazy", "pkg.owner", LAZY, 2),
    }
    assert type_only_back_references(edges) == [Edge("pkg.helpers", "pkg.owner", TYPE_ONLY, 4)]
    assert import_circles(edges, ALL_KINDS) == [["pkg.helpers", "pkg.owner"]]
    assert import_circles(edges, EXECUTED_KINDS) == []
