"""`batchscope vllm-check RELEASE`: a vLLM release nobody here has seen, in one run.

Runs the release matrix's new-release check (tools/vllm_matrix.py --new) from a batchscope
checkout: vLLM's wheel unpacked onto the newest reference venv; its scheduler against the
engine deciding as the newest modelled release on the shipped and random traces (which
traces differ, at which first step); the adapter on its own engine loops; the scheduler,
KV-cache and engine-core files changed. Exit 0 when nothing differs, 1 when something does,
2 on bad input or outside a checkout.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from app.cli.common import CliError

CHECKOUT = Path(__file__).resolve().parents[2]
TOOL = CHECKOUT / "tools" / "vllm_matrix.py"


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "vllm-check",
        help="check a new vLLM release: decisions, adapter, changed files (from a checkout)",
    )
    p.add_argument("release", help="the vLLM release, e.g. 0.35 or 0.35.1")
    p.add_argument("--random", type=int, default=40, metavar="N", help="traces per loop")
    p.set_defaults(run=cmd_vllm_check)


def cmd_vllm_check(args: argparse.Namespace) -> int:
    release = str(args.release).strip().lstrip("v")
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", release):
        raise CliError(f"{args.release!r} is not a vLLM release (e.g. 0.35 or 0.35.1)")
    if args.random < 0:
        raise CliError("--random must be >= 0")
    if not TOOL.exists():
        raise CliError(
            "vllm-check runs from a batchscope checkout (tools/vllm_matrix.py and the "
            "reference venvs of `make vllm-venv`); this install has no tools/"
        )
    cmd = [sys.executable, str(TOOL), "--new", release, "--random", str(args.random)]
    return subprocess.run(cmd, cwd=CHECKOUT).returncode
