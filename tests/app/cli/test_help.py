"""`batchscope --version`, and every --help showing each option's default and the
environment variable a setting is read from."""

from __future__ import annotations

import argparse
import subprocess
import sys

from app.cli.main import build_parser
from app.resources import package_version
from tests.conftest import ROOT


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_version() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "app.cli", "--version"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0 and r.stdout.strip() == f"batchscope {package_version()}"


def test_every_help_shows_defaults_and_environment_variables() -> None:
    for name, sub in _subparsers().items():
        text = " ".join(sub.format_help().split())  # unwrap argparse's line breaks
        for action in sub._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            env = getattr(action, "env", None)
            default = getattr(action, "shown_default", action.default)
            if env:
                assert f"env: {env}" in text, (name, action.dest)
            if default not in (None, False):
                assert f"default: {default}" in text, (name, action.dest)
    serve = " ".join(_subparsers()["serve"].format_help().split())
    for expected in (
        "(default: 127.0.0.1; env: BATCHSCOPE_HOST)",
        "(default: 8000; env: BATCHSCOPE_PORT)",
        "(default: sqlite:///./data/batchscope.db; env: DATABASE_URL)",
        "(default: generated at start; env: BATCHSCOPE_TOKEN)",
    ):
        assert expected in serve
