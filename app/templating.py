"""Jinja2 templates over templates/ (autoescaped) with the dashboard's formatting filters,
a `static_url()` helper that adds a cache-busting version to our own assets, and the
protocol's codes (`codes`, protocol.codes) with the legends' labels, so a template lists
the codes the frames carry, not a copy of them.
"""

from __future__ import annotations

import hashlib
import time
from functools import lru_cache
from typing import Any
from urllib.parse import quote

from fastapi import Request
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from app.lab.catalog import COUNTS
from app.resources import asset_path
from engine.faults import stopped_text
from engine.releases import KNOB_SINCE, SUPPORTED, version_key
from protocol import codes
from protocol.codes import BlockState, SegmentKind

TEMPLATE_DIR = asset_path("templates")
STATIC_DIR = asset_path("static")


def fmt_tokens(value: Any) -> str:
    """1234 -> '1,234'; None -> '–'."""
    if value is None or value == "":
        return "–"
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return "–"


def fmt_pct(value: Any, digits: int = 1) -> str:
    """A fraction (0.123) -> '12.3%'."""
    if value is None:
        return "–"
    try:
        return f"{float(value) * 100:.{digits}f}%"
    except (TypeError, ValueError):
        return "–"


def _number(value: Any) -> float | None:
    """`value` as a float; None for None or anything that is not a number."""
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def fmt_ms(seconds: Any) -> str:
    """Seconds -> '12.3 ms' (or '1.23 s' from one second up); None -> '–'."""
    s = _number(seconds)
    if s is None:
        return "–"
    if s >= 1.0:
        return f"{s:.2f} s"
    ms = s * 1000.0
    return f"{ms:.1f} ms" if ms >= 10 else f"{ms:.2f} ms"


def fmt_time(epoch: Any) -> str:
    """Seconds since the epoch -> '2026-11-29 10:25:12' (server local time); None -> '–'."""
    if epoch is None or epoch == "":
        return "–"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(epoch)))
    except (TypeError, ValueError, OverflowError, OSError):
        return "–"


def fmt_metric(value: Any, kind: str = "int", signed: bool = False) -> str:
    """A compare-table value: kind 'ms' (seconds in), 'rate' (per second) or 'int';
    `signed` puts a '+' before positive differences."""
    if value is None:
        return "–"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "–"
    sign = "+" if signed and number > 0 else ""
    if kind == "ms":
        return "-" + fmt_ms(-number) if number < 0 else sign + fmt_ms(number)
    if kind == "rate":
        return f"{sign}{number:,.1f}"
    return f"{sign}{number:,.0f}"


def fmt_figure(value: Any, count: bool = False) -> str:
    """A lab figure: a count that is a whole number as one ('94'), anything else with two
    decimals ('12.35'); None -> '–'."""
    number = _number(value)
    if number is None:
        return "–"
    if count and number.is_integer():
        return str(int(number))
    return f"{number:.2f}"


@lru_cache(maxsize=256)
def _asset_version(path: str) -> str:
    file = STATIC_DIR / path
    try:
        return hashlib.sha1(file.read_bytes()).hexdigest()[:10]
    except OSError:
        return "0"


def static_url(path: str) -> str:
    """URL of a file under static/. Vendored files carry their version in the name;
    our own assets get `?v=<content hash>` so a redeploy never serves a stale script."""
    path = path.lstrip("/")
    if path.startswith("vendor/"):
        return f"/static/{path}"
    return f"/static/{path}?v={_asset_version(path)}"


def js_import_map() -> dict[str, dict[str, str]]:
    """The pages' import map: each module under static/js at its static_url, so an
    import of "./model.js" loads the same versioned URL a page's script tag names."""
    names = sorted(p.name for p in (STATIC_DIR / "js").glob("*.js"))
    return {"imports": {f"/static/js/{n}": static_url(f"js/{n}") for n in names}}


# Knobs that only later vLLM releases have: (name, input kind, what it does). The forms
# show them only for a release that has them (engine.releases.KNOB_SINCE says since when).
LATER_KNOBS: tuple[dict[str, str], ...] = tuple(
    {"name": name, "kind": kind, "since": KNOB_SINCE[name], "title": title}
    for name, kind, title in (
        ("max_num_active_seqs", "int", "admission cap into RUNNING below max_num_seqs (0 = off)"),
        ("watermark", "float", "share of the KV pool kept free when admitting (0 = off)"),
        (
            "prefill_schedule_interval",
            "int",
            "prefill only once every N steps while a decode runs (1 = every step)",
        ),
        (
            "long_prefill_token_threshold_adaptive",
            "bool",
            "floor long_prefill_token_threshold at max_num_batched_tokens // requests",
        ),
        (
            "cache_aware_admission_window",
            "int",
            "within the first N waiting requests, admit those with a cached prefix first "
            "(0 = off; FCFS with prefix caching)",
        ),
        (
            "cache_aware_admission_threshold",
            "float",
            "KV usage from which the cache-aware window applies",
        ),
    )
)


# The legends' labels, keyed by the code (a template lists every member of the enum).
SEGMENT_LABELS: dict[SegmentKind, str] = {
    SegmentKind.WAITING: "waiting",
    SegmentKind.PREFILL: "prefill chunk",
    SegmentKind.DECODE: "decode run",
    SegmentKind.PREEMPTED: "preempted (recompute)",
}
BLOCK_LABELS: dict[BlockState, str] = {
    BlockState.FREE: "free",
    BlockState.CACHED: "cached (free, reusable prefix)",
    BlockState.USED: "used",
    BlockState.SHARED: "shared (ref_cnt > 1)",
    BlockState.WITHHELD: "withheld (kv_block_limit)",
}


def release_has(knob: dict[str, str], release: object) -> bool:
    """Whether the vLLM `release` ('0.33', '0.32.0', '' = the newest) has a later knob."""
    text = str(release or SUPPORTED[-1]).strip().lstrip("v")
    try:
        return version_key(".".join(text.split(".")[:2])) >= version_key(knob["since"])
    except ValueError:
        return True


def make_environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=select_autoescape(["html", "htm", "xml"], default=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["tokens"] = fmt_tokens
    env.filters["pct"] = fmt_pct
    env.filters["ms"] = fmt_ms
    env.filters["time"] = fmt_time
    env.filters["metric"] = fmt_metric
    env.filters["figure"] = fmt_figure
    env.filters["stopped_text"] = stopped_text
    # One URL component (a session id in a path or a query value): escapes '/', '&', '?'.
    env.filters["urlpart"] = lambda value: quote(str(value), safe="")
    env.globals["static_url"] = static_url
    env.globals["js_import_map"] = js_import_map
    env.globals["vllm_releases"] = SUPPORTED
    env.globals["later_knobs"] = LATER_KNOBS
    env.globals["release_has"] = release_has
    env.globals["codes"] = codes
    env.globals["lab_counts"] = COUNTS
    env.globals["segment_labels"] = SEGMENT_LABELS
    env.globals["block_labels"] = BLOCK_LABELS
    return env


templates = Jinja2Templates(env=make_environment())


def render_flash(request: Request, ok: bool, message: str) -> str:
    """The #flash fragment that the control endpoints return to htmx."""
    del request  # kept in the signature so a future flash can use the request
    template = templates.env.get_template("partials/_flash.html")
    return template.render(ok=ok, message=message)
