"""The import graph of the project's own modules, read from their AST (nothing imported).

Each edge is marked by how the import runs: at import time, inside a function (lazy), or
only for the type checker (under `if TYPE_CHECKING:`). import-linter skips type-only
imports, so a `TYPE_CHECKING` import of a module that imports the importer (a cycle with
its import hidden) is found here instead. `python -m tests.import_graph` prints the counts.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "app", "protocol", "batchscope_vllm", "bench", "tools")
"""Top-level folders whose modules form the graph (tools/ holds scripts, no package)."""

RUNTIME, LAZY, TYPE_ONLY = "runtime", "lazy", "type-only"


@dataclass(frozen=True, slots=True)
class Edge:
    importer: str
    imported: str
    kind: str
    """runtime (at import), lazy (inside a function) or type-only (`if TYPE_CHECKING:`)."""
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    """Module name -> file, for every .py file under PACKAGES."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "node_modules" not in path.parts:
                modules[module_name(path)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _imports(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement with how it runs."""

    def walk(node: ast.AST, kind: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, kind
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), TYPE_ONLY)
                for stmt in child.orelse:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), kind)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from walk(child, TYPE_ONLY if kind == TYPE_ONLY else LAZY)
            else:
                yield from walk(child, kind)

    yield from walk(tree, RUNTIME)


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The deepest project module `name` names (a.b.c, else a.b, else a)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _targets(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    base = node.module or ""
    if node.level:
        package = importer.split(".") if is_package else importer.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, base] if base else package)
    for alias in node.names:
        yield f"{base}.{alias.name}" if alias.name != "*" else base


def import_edges(modules: dict[str, Path] | None = None) -> list[Edge]:
    """Every import of one project module by another."""
    modules = modules if modules is not None else project_modules()
    edges: list[Edge] = []
    for importer, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        for node, kind in _imports(tree):
            for target in _targets(node, importer, is_package):
                imported = _resolve(target, modules)
                if imported is not None and imported != importer:
                    edges.append(Edge(importer, imported, kind, node.lineno))
    return edges


def _reaches(edges: list[Edge]) -> dict[str, set[str]]:
    """module -> every module it imports, directly or through others (any kind)."""
    out: dict[str, set[str]] = {}
    for e in edges:
        out.setdefault(e.importer, set()).add(e.imported)
    closure: dict[str, set[str]] = {}
    for start in out:
        seen: set[str] = set()
        stack = [start]
        while stack:
            for nxt in out.get(stack.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        closure[start] = seen
    return closure


def type_only_back_references(edges: list[Edge]) -> list[Edge]:
    """Type-only imports of a module that imports the importer, directly or in a cycle."""
    reach = _reaches(edges)
    return [e for e in edges if e.kind == TYPE_ONLY and e.importer in reach.get(e.imported, set())]


def import_circles(edges: list[Edge], kinds: frozenset[str]) -> list[list[str]]:
    """The strongly connected sets of two or more modules over edges of `kinds` (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if e.kind in kinds:
            graph.setdefault(e.importer, set()).add(e.imported)
            graph.setdefault(e.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                circles.append(sorted(members))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(circles)


ALL_KINDS = frozenset({RUNTIME, LAZY, TYPE_ONLY})
EXECUTED_KINDS = frozenset({RUNTIME, LAZY})


def main() -> None:
    modules = project_modules()
    edges = import_edges(modules)
    for package in PACKAGES:
        files = [p for m, p in modules.items() if m.split(".")[0] == package]
        lines = sum(len(p.read_text().splitlines()) for p in files)
        print(f"{package}: {len(files)} files, {lines} lines")
    back = type_only_back_references(edges)
    for package in PACKAGES:
        n = sum(1 for e in back if e.importer.split(".")[0] == package)
        print(f"type-only back-references in {package}: {n}")
    for e in back:
        print(f"  {e.importer}:{e.line} -> {e.imported}")
    for label, kinds in (("all imports", ALL_KINDS), ("executed imports", EXECUTED_KINDS)):
        circles = import_circles(edges, kinds)
        num_files = sum(len(c) for c in circles)
        print(f"import circles ({label}): {len(circles)} ({num_files} files)")
        for c in circles:
            print(f"  {' <-> '.join(c)}")


if __name__ == "__main__":
    main()
