"""Build hook for batchscope-vllm: the wheel carries the checkout's batchscope_vllm package
and private copies of the standard-library-only protocol modules it shares with the
dashboard (app/protocol/envelope.py, frames.py, session.py) as batchscope_vllm._protocol,
with the imports pointed there. So a vLLM node needs neither batchscope's `app` package
nor its web and database stack: only websockets.

Build it from the checkout (the sources are two directories up); they are staged under
build/src first, a fresh copy each time."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parents[1]
SHARED = ("envelope", "frames", "session")  # the app/protocol modules the adapter imports
STAGE = HERE / "build" / "src"


def stage() -> None:
    shutil.rmtree(STAGE, ignore_errors=True)
    package = STAGE / "batchscope_vllm"
    (package / "_protocol").mkdir(parents=True)
    for source in sorted((CHECKOUT / "batchscope_vllm").glob("*.py")):
        text = source.read_text(encoding="utf-8")
        text = text.replace("from app.protocol.", "from batchscope_vllm._protocol.")
        (package / source.name).write_text(text, encoding="utf-8")
    (package / "_protocol" / "__init__.py").write_text(
        '"""Copies of batchscope\'s app/protocol modules (standard library only)."""\n',
        encoding="utf-8",
    )
    for name in SHARED:
        text = (CHECKOUT / "app" / "protocol" / f"{name}.py").read_text(encoding="utf-8")
        if "from app" in text or "import app" in text:
            raise SystemExit(f"app/protocol/{name}.py must stay standard-library only")
        (package / "_protocol" / f"{name}.py").write_text(text, encoding="utf-8")


stage()
setup(
    package_dir={"": str(STAGE.relative_to(HERE))},
    packages=["batchscope_vllm", "batchscope_vllm._protocol"],
)
