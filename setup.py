"""Build hook (the metadata is in pyproject.toml): a wheel carries the files the app
reads at run time -- templates/, static/, scenarios/, docs/, migrations/, alembic.ini -- inside
the `app` package at app/_assets/, where app.resources finds them. An editable install
reads them from the checkout instead, so nothing is copied for it."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
ASSETS = ("templates", "static", "scenarios", "docs", "migrations", "alembic.ini")  # app.resources


class BuildPyWithAssets(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "app" / "_assets"
        for name in ASSETS:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(
                    source,
                    target / name,
                    dirs_exist_ok=True,
                    # docs/: the pages the dashboard serves (/guide), not its pictures.
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.png"),
                )
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target / name)


setup(cmdclass={"build_py": BuildPyWithAssets})
