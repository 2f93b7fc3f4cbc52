"""create_app(): routers, static files, lifespan (hub -> engine thread; reverse on stop)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from app.db.lifecycle import describe_orphan, mark_ended, mark_orphans
from app.db.migrate import prepare
from app.db.session import make_engine, make_sessionmaker
from app.deps import install_error_handlers
from app.edge.hosts import AllowedHosts
from app.edge.middleware import EdgeMiddleware
from app.live.engine_service import EngineService
from app.live.hub import EventHub
from app.live.metrics import Metrics
from app.live.relay import PgRelay
from app.nodes.ingest import NodeRegistry
from app.records.recorder import Recorder
from app.records.retention import enforce_cap
from app.routes import (
    compare,
    control,
    dashboard,
    export,
    ingest,
    live,
    metrics,
    nodes,
    scenarios,
    sessions,
    ws,
)
from app.security import COOKIE, token_matches
from app.settings import Settings, get_settings

ROOT = Path(__file__).resolve().parents[1]
SHUTDOWN_DRAIN_S = 20.0
"""How long a shutdown keeps retrying a database that is away before giving up."""
log = logging.getLogger("batchscope")


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Start order: database -> hub -> recorder -> engine thread; reverse on shutdown.
        db_engine = make_engine(settings.database_url)
        prepare(db_engine, settings.database_url)
        app.state.db = make_sessionmaker(db_engine)
        for orphan in await asyncio.to_thread(mark_orphans, app.state.db):
            log.warning("%s", describe_orphan(orphan))
        recorder = Recorder(hub, app.state.db, database_url=settings.database_url)
        recorder.on_rejected.append(app.state.nodes.on_rejected)
        app.state.recorder = recorder
        recorder.start()
        relay = None
        is_pg = settings.database_url.startswith("postgres")
        if settings.relay == "on" or (settings.relay == "auto" and is_pg):
            relay = PgRelay(hub, settings.database_url)
            await relay.start()
        app.state.relay = relay
        service = app.state.service
        if service is not None:
            service.start()
        cap = None
        if settings.max_recordings_mb > 0:
            max_bytes = int(settings.max_recordings_mb * 1e6)
            cap = asyncio.create_task(enforce_cap(app.state.db, hub, max_bytes))
        try:
            yield
        finally:
            if cap is not None:
                cap.cancel()
            # Ordered shutdown (SIGINT/SIGTERM; uvicorn has closed the sockets): stop
            # intake, drain the writer, then mark what was live as ended.
            if service is not None:
                service.stop()
            for _ in range(50):
                await asyncio.sleep(0)  # let the engine thread's last hops land
            if relay is not None:
                await relay.stop()
            if not await recorder.stop(timeout=SHUTDOWN_DRAIN_S):
                log.error("shutdown: %d frames could not be written", recorder.lag)
            with contextlib.suppress(Exception):
                await asyncio.to_thread(
                    mark_ended, app.state.db, recorder.sessions_seen, "shutdown"
                )
            db_engine.dispose()

    app = FastAPI(title="batchscope", lifespan=lifespan)
    hub = EventHub()
    app.state.settings = settings
    app.state.hub = hub
    app.state.metrics = Metrics(hub)
    app.state.service = EngineService(settings, hub) if settings.engine else None
    app.state.nodes = NodeRegistry(hub)
    hub.follow_most_active = not settings.engine

    for module in (
        control,
        scenarios,
        live,
        sessions,
        compare,
        export,
        nodes,
        ingest,
        ws,
        metrics,
        dashboard,
    ):
        app.include_router(module.router)
    install_error_handlers(app)
    app.add_middleware(EdgeMiddleware, hosts=AllowedHosts(settings.host, settings.allowed_hosts))
    static = ROOT / "static"
    if static.is_dir():
        app.mount("/static", StaticFiles(directory=static), name="static")

    @app.get("/launch", include_in_schema=False)
    async def launch(request: Request, token: str = "") -> Response:
        """The launch URL printed at start: sets the control cookie once, then redirects."""
        if not token_matches(settings.token, token):
            return Response("invalid or missing token", status_code=403)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(
            COOKIE, token, httponly=True, samesite="strict", secure=request.url.scheme == "https"
        )
        return response

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> JSONResponse:
        service = app.state.service
        recorder = getattr(app.state, "recorder", None)
        relay = getattr(app.state, "relay", None)
        recorder_status = recorder.status() if recorder else None
        relay_status = relay.status() if relay else None
        ok = all(s is None or s["ok"] for s in (recorder_status, relay_status))
        body = {
            "ok": ok,
            "engine": bool(service and service.core and service.core.alive),
            "session": hub.live_session,
            "recorder": recorder_status,
            "relay": relay_status,
        }
        return JSONResponse(body, status_code=200 if ok else 503)

    return app
