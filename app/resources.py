"""Where batchscope's shipped files are (templates/, static/, scenarios/, docs/, migrations/ and
alembic.ini), found through importlib.resources, never through the working directory.

A wheel carries them inside the package, at `app/_assets/` (setup.py copies them there
when it builds). A source checkout (an editable install, the tests) keeps them at the
repository root, next to `app/`.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from importlib.resources import files
from pathlib import Path

ASSETS = ("templates", "static", "scenarios", "docs", "migrations", "alembic.ini")
"""What setup.py copies into a wheel."""
PACKAGED_DIR = "_assets"
_CHECKOUT = Path(__file__).resolve().parents[1]


def asset_path(name: str) -> Path:
    """The installed copy of one of ASSETS (a directory or a file)."""
    if name not in ASSETS:
        raise ValueError(f"{name!r} is not one of batchscope's shipped files {ASSETS}")
    packaged = Path(str(files("app").joinpath(PACKAGED_DIR, name)))
    if packaged.exists():
        return packaged
    checkout = _CHECKOUT / name
    if checkout.exists():
        return checkout
    raise FileNotFoundError(
        f"batchscope's {name} is missing from this install (looked in {packaged} and "
        f"{checkout}); reinstall the package"
    )


def package_version() -> str:
    """The installed distribution's version (`batchscope --version`, /openapi.json)."""
    try:
        return version("batchscope")
    except PackageNotFoundError:  # a checkout used without installing it
        return "0+unknown"
