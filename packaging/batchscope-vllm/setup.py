"""Build hook for batchscope-vllm: the wheel carries the checkout's batchscope_vllm package
and the standard-library-only `protocol` package it shares with the dashboard (the same
top-level package batchscope's own wheel ships), copied as they are. So a vLLM node needs
neither batchscope's `app` package nor its web and database stack: only websockets.

Build it from the checkout (the sources are two directories up); they are staged under
build/src first, a fresh copy each time."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parents[1]
PACKAGES = ("batchscope_vllm", "protocol")
STAGE = HERE / "build" / "src"


def stage() -> None:
    shutil.rmtree(STAGE, ignore_errors=True)
    for name in PACKAGES:
        shutil.copytree(
            CHECKOUT / name,
            STAGE / name,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )


stage()
setup(package_dir={"": str(STAGE.relative_to(HERE))}, packages=list(PACKAGES))
