"""The scheduler core stays free of torch and the web/DB stack."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_engine_pulls_in_no_torch_web_or_db() -> None:
    code = (
        "import sys, engine, engine.scheduler, engine.simulate, engine.runner;"
        "bad = [m for m in ('torch','fastapi','sqlalchemy','pydantic','app') if m in sys.modules];"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
