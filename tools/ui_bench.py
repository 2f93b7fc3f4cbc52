"""Browser half of `make bench`: headless Chromium against a real server (sim runner).

1. Live: 500 running requests (max_num_seqs 512): requestAnimationFrame callbacks per
   second over 5 s while the server streams, and the main-thread ms of each renderer.
2. First paint of a 10,000-request session (the engine paused with 10,000 requests in):
   ms from navigation start to the frame after the timeline drew all rows; then the cost
   of a filter (id search, status) and a redraw at that size.
3. In the page with its socket closed (no server competing for the CPU): the fold and
   draw of 2,000- and 10,000-request snapshots until painted; 500 running requests
   generated in the page; and the JS heap over an hour-long session (90,000 steps,
   36,000 requests) folded as fast as it goes, sampled after a collection at each quarter.

    python tools/ui_bench.py [--json OUT.json] [--seconds 5]
Targets (issue 14): first paint <= 500 ms for 10,000 requests; >= 30 fps with 500 running;
the heap at the end of the hour within 1.5x of the heap at its first quarter.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.browser.harness import synthetic_snapshot  # noqa: E402
from tools.live_server import LiveServer, chromium, live_server, recorder_lag  # noqa: E402
from tools.ui_bench_js import (  # noqa: E402
    FILTER_JS,
    FIRST_PAINT_JS,
    FPS_JS,
    HOUR_JS,
    PAINT_SNAPSHOT_JS,
    SYNTHETIC_JS,
)

ENV = {
    "BATCHSCOPE_MAX_NUM_SEQS": "512",
    "BATCHSCOPE_MAX_NUM_BATCHED_TOKENS": "2048",
    "BATCHSCOPE_NUM_GPU_BLOCKS": "16384",
    "BATCHSCOPE_MAX_MODEL_LEN": "4096",
}
HOUR_STEPS = 90_000


def inject(srv: LiveServer, n: int, max_tokens: int) -> None:
    while n > 0:
        count = min(256, n)
        srv.api("POST", "/api/requests", json={"prompt_len": 64, "max_tokens": max_tokens,
                                               "count": count})  # fmt: skip
        n -= count


def open_page(browser: Any, srv: LiveServer) -> Any:
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(f"{srv.url}/launch?token={srv.token}")
    page.wait_for_function("() => window.batchscope && batchscope.conn.snapshots > 0")
    return page


def live_part(browser: Any, srv: LiveServer, seconds: float) -> dict[str, Any]:
    page = open_page(browser, srv)
    inject(srv, 500, 3000)
    page.wait_for_function("() => batchscope.model.queues.running >= 500", timeout=60_000)
    page.wait_for_timeout(1000)
    live = page.evaluate(FPS_JS, seconds)
    page.close()
    return dict(live)


def paint_part(browser: Any, srv: LiveServer) -> dict[str, Any]:
    srv.api("POST", "/api/pause")
    total = len(srv.api("GET", "/api/requests").json())
    inject(srv, 10_000 - total, 3000)
    n = len(srv.api("GET", "/api/requests").json())
    deadline = time.monotonic() + 60  # the recorder's writes are done: an idle server
    while recorder_lag(srv) and time.monotonic() < deadline:
        time.sleep(0.2)
    paints = []
    context = browser.new_context(viewport={"width": 1500, "height": 1100})
    launch = context.new_page()
    launch.goto(f"{srv.url}/launch?token={srv.token}")  # the control cookie
    launch.close()
    for _ in range(3):
        page = context.new_page()
        page.goto(f"{srv.url}/")  # navigation start = this request (no redirect)
        paints.append(page.evaluate(FIRST_PAINT_JS, n))
        queries = ({"q": "-12"}, {"q": "", "status": "running"}, {"status": "", "sort": "-ttft"})
        filters = [page.evaluate(FILTER_JS, q) for q in queries]
        page.close()
    context.close()
    srv.api("POST", "/api/resume")
    return {"requests": n, "paints": paints, "filters": filters}


def in_page_part(browser: Any, srv: LiveServer, seconds: float) -> dict[str, Any]:
    page = open_page(browser, srv)
    page.evaluate("() => { batchscope.conn.ws.onclose = null; batchscope.conn.ws.close(); }")
    out: dict[str, Any] = {}
    for n in (2000, 10_000):
        snaps = []
        for attempt in range(2):
            snap = synthetic_snapshot(n)
            snap["session"] = snap["data"]["session"] = f"scale-{n}-{attempt}"
            snaps.append(page.evaluate(PAINT_SNAPSHOT_JS, json.dumps(snap)))
        out[f"paint_{n}_ms"] = [x["ms"] for x in snaps]
        out[f"paint_{n}_detail"] = snaps
    out["synthetic_500"] = page.evaluate(SYNTHETIC_JS, seconds)
    cdp = page.context.new_cdp_session(page)
    heap = []
    t0 = time.monotonic()
    for part in range(4):
        state = page.evaluate(HOUR_JS, [HOUR_STEPS // 4, part])
        cdp.send("HeapProfiler.collectGarbage")
        used = cdp.send("Runtime.getHeapUsage")["usedSize"]
        heap.append({"step": state["step"], "requests_kept": state["reqs"], "heap_mb": used / 1e6})
    out["hour"] = {"heap": heap, "seconds": round(time.monotonic() - t0, 1)}
    page.close()
    return out


def bench(seconds: float = 5.0) -> dict[str, Any]:
    with live_server(workload="none", env=ENV) as srv, chromium() as browser:
        live = live_part(browser, srv, seconds)
        paint = paint_part(browser, srv)
        page = in_page_part(browser, srv, seconds)
    first = min(p["first_paint_ms"] for p in paint["paints"])
    heap = page["hour"]["heap"]
    bounded = heap[-1]["heap_mb"] <= 1.5 * heap[0]["heap_mb"]
    ok = live["fps"] >= 30 and first <= 500 and bounded
    return {"live_500": live, "paint_10k_live": paint, "in_page": page, "ok": ok}


def main() -> int:
    ap = argparse.ArgumentParser(description="headless-Chromium UI benchmark")
    ap.add_argument("--json", help="also write the result here")
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    r = bench(args.seconds)
    live, paint, page = r["live_500"], r["paint_10k_live"], r["in_page"]
    print(
        f"live, {live['running']} running ({live['requests']} requests): {live['fps']:.1f} fps"
        f" (worst frame {live['worst_frame_ms']:.0f} ms, {live['steps']} steps,"
        f" {live['frames_folded']} frames folded); main thread ms: {live['main_thread_ms']}"
    )
    print(
        f"first paint, {paint['requests']} requests (server snapshot): "
        + ", ".join(f"{p['first_paint_ms']:.0f} ms" for p in paint["paints"])
    )
    p = min(paint["paints"], key=lambda x: x["first_paint_ms"])
    print(
        f"  best: DOM ready {p['dom_ready_ms']} ms, socket open {p['ws_open_ms']} ms, snapshot"
        f" in {p['snapshot_at_ms']} ms, parse {p['parse_ms']} ms, fold {p['fold_ms']} ms,"
        f" draw {p['draw_ms']:.0f} ms"
    )
    print(
        "filter + redraw at that size: "
        + ", ".join(f"{f['rows']} rows {f['ms']:.0f} ms" for f in paint["filters"])
    )
    for n in (2000, 10_000):
        print(
            f"in-page snapshot, {n} requests: fold + draw + paint "
            + ", ".join(f"{t:.0f} ms" for t in page[f"paint_{n}_ms"])
        )
    print(f"in-page 500 running: {page['synthetic_500']['fps']:.1f} fps")
    heap = page["hour"]["heap"]
    print(
        f"hour ({HOUR_STEPS} steps, {page['hour']['seconds']} s): heap MB "
        + ", ".join(f"{h['heap_mb']:.1f} ({h['requests_kept']} rows)" for h in heap)
    )
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1) + "\n")
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
