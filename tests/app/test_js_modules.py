"""The browser code is ES modules (static/js): every page names its entry modules with
<script type="module">, the import map gives every module its versioned URL, no module
hangs anything on window but the dashboard's one test handle, every module is reached
from a page, and ESLint's module-graph rule (tools/eslint_module_graph.js) fails on a
missing module, a missing export and an import cycle."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from tests.conftest import ROOT, LiveServer

JS = ROOT / "static" / "js"
TEMPLATES = ROOT / "templates"
ESLINT = ROOT / "node_modules" / ".bin" / "eslint"
IMPORT = re.compile(r'^(?:import|export)\b[^;]*?\bfrom "\./([\w.]+)";|^import "\./([\w.]+)";', re.M)
ENTRY = re.compile(
    r"""<script type="module"(?: async)? src="\{\{ static_url\('js/([\w.]+)'\) \}\}">"""
)


def imports_of(name: str) -> set[str]:
    text = (JS / name).read_text(encoding="utf-8")
    return {a or b for a, b in IMPORT.findall(text)}


def test_every_script_of_ours_in_a_template_is_a_module() -> None:
    for page in TEMPLATES.rglob("*.html"):
        for tag in re.findall(r"<script[^>]*static_url\('js/[^>]*>", page.read_text()):
            assert ENTRY.match(tag), f"{page.name}: {tag}"


def test_every_module_is_reached_from_a_pages_entry() -> None:
    entries = {m for p in TEMPLATES.rglob("*.html") for m in ENTRY.findall(p.read_text())}
    assert {"dashboard.js", "socket.js", "common.js", "compare.js"} <= entries
    seen: set[str] = set()
    todo = list(entries)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        assert (JS / name).is_file(), name
        todo += imports_of(name)
    assert seen == {p.name for p in JS.glob("*.js")}


def test_no_module_hangs_names_on_window() -> None:
    for path in JS.glob("*.js"):
        text = path.read_text(encoding="utf-8")
        assert "BS." not in text, path.name
        assigned = re.findall(r"\bwindow\.(\w+)\s*=[^=]", text)
        assert assigned == (["batchscope"] if path.name == "dashboard.js" else []), path.name


def test_the_import_map_names_every_module_at_its_served_url(live_server: LiveServer) -> None:
    with live_server.client(token=False) as c:
        page = BeautifulSoup(c.get("/").text, "html.parser")
        importmap = page.find("script", type="importmap")
        assert importmap is not None
        imports = json.loads(importmap.get_text())["imports"]
        assert set(imports) == {f"/static/js/{p.name}" for p in JS.glob("*.js")}
        for url, versioned in imports.items():
            assert versioned.startswith(url + "?v="), versioned
            assert c.get(versioned).status_code == 200, versioned
        # An entry's tag names the same URL an import of it resolves to: one instance.
        for tag in page.find_all("script", type="module"):
            src = str(tag["src"])
            assert imports[src.split("?")[0]] == src


@pytest.mark.skipif(not ESLINT.exists(), reason="node_modules missing (make js-lint)")
def test_the_module_graph_rule_fails_on_a_missing_export_and_a_cycle(tmp_path: Path) -> None:
    mods = tmp_path / "static" / "js"
    mods.mkdir(parents=True)
    (mods / "a.js").write_text('import { b } from "./b.js";\nexport const a = () => b;\n')
    (mods / "b.js").write_text('import { a } from "./a.js";\nexport const b = () => a;\n')
    (mods / "c.js").write_text('import { nope } from "./a.js";\nimport "./gone.js";\n'
                               "export const c = nope;\n")  # fmt: skip
    shutil.copy(ROOT / "eslint.config.js", tmp_path / "eslint.config.js")
    (tmp_path / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "eslint_module_graph.js", tmp_path / "tools")
    (tmp_path / "node_modules").symlink_to(ROOT / "node_modules")
    done = subprocess.run(
        [str(ESLINT), "--format", "json", "static/js"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    found = {
        (Path(f["filePath"]).name, m["message"])
        for f in json.loads(done.stdout)
        for m in f["messages"]
        if m.get("ruleId") == "bs/module-graph"
    }
    assert found == {
        ("a.js", "import cycle: a.js -> b.js -> a.js"),
        ("b.js", "import cycle: b.js -> a.js -> b.js"),
        ("c.js", '"nope" is not exported by ./a.js'),
        ("c.js", 'import "./gone.js": no such module (or it does not parse)'),
    }


@pytest.mark.skipif(not ESLINT.exists(), reason="node_modules missing (make js-lint)")
def test_the_shipped_modules_pass_eslint() -> None:
    done = subprocess.run(
        [str(ESLINT), "static/js", "eslint.config.js", "tools/eslint_module_graph.js"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
