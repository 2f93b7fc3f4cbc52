"""Write docs/dashboard.png: the live dashboard of a running demo (sim runner, Poisson
workload plus a burst sharing a system prompt), captured with headless Chromium.

    python tools/screenshot.py [OUT.png] [--seconds 8] [--width 1600]
    python tools/screenshot.py OUT.png --url http://127.0.0.1:8000 --token T   # existing server
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.live_server import LiveServer, chromium, live_server


def drive_demo(server: LiveServer) -> None:
    """A lively but readable picture: steady arrivals, a shared-prefix burst, a tighter
    token budget (one timeline marker) and a smaller KV pool (some preemption)."""
    server.api("POST", "/api/workload", json={"enabled": True, "rate": 30.0,
               "prompt_len_mean": 160, "max_tokens_mean": 120})  # fmt: skip
    server.api("POST", "/api/requests", json={"prompt_len": 48, "max_tokens": 160,
               "shared_prefix": "system", "count": 6})  # fmt: skip


def capture(url: str, token: str, out: Path, seconds: float, width: int,
            before_wait: LiveServer | None) -> None:  # fmt: skip
    with chromium() as browser:
        page = browser.new_page(viewport={"width": width, "height": 1000})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        if before_wait is not None:
            drive_demo(before_wait)  # first, so the page's forms show the demo's settings
        page.goto(f"{url}/launch?token={token}")
        page.wait_for_function(
            "() => window.batchscope && batchscope.conn.snapshots > 0", timeout=20_000
        )
        if before_wait is not None:
            page.wait_for_timeout(seconds * 500)
            before_wait.api("POST", "/api/config", json={"max_num_batched_tokens": 128,
                            "kv_block_limit": 120})  # fmt: skip
            page.wait_for_timeout(seconds * 500)
        else:
            page.wait_for_timeout(seconds * 1000)
        # Freeze the picture: stop the stream, let the throttled renderers catch up.
        page.evaluate("() => { batchscope.conn.ws.onclose = null; batchscope.conn.ws.close(); }")
        # Full-page shots only draw what is on screen: make the viewport the page.
        height = page.evaluate("() => document.documentElement.scrollHeight")
        page.set_viewport_size({"width": width, "height": int(height)})
        page.wait_for_timeout(2500)
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out), full_page=True)
        if errors:
            print("console errors:", *errors, sep="\n  ", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default="docs/dashboard.png")
    ap.add_argument("--url", help="an already running dashboard (default: start one)")
    ap.add_argument("--token", default="", help="its control token (with --url)")
    ap.add_argument("--seconds", type=float, default=5.0, help="how long the demo runs first")
    ap.add_argument("--width", type=int, default=1600)
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.url:
        capture(args.url.rstrip("/"), args.token, out, args.seconds, args.width, None)
    else:
        with live_server() as server, contextlib.nullcontext():
            capture(server.url, server.token, out, args.seconds, args.width, server)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
