"""create_app(): routers, static files, lifespan (hub -> engine thread; reverse on stop)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from app.db.migrate import prepare
from app.db.session import make_engine, make_sessionmaker
from app.deps import install_error_handlers
from app.live.engine_service import EngineService
from app.live.hub import EventHub
from app.live.metrics import Metrics
from app.live.relay import PgRelay
from app.nodes.ingest import NodeRegistry
from app.records.recorder import Recorder
from app.routes import (
    compare,
    control,
    dashboard,
    export,
    forensics,
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


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Start order: database -> hub -> recorder -> engine thread; reverse on shutdown.
        db_engine = make_engine(settings.database_url)
        prepare(db_engine, settings.database_url)
        app.state.db = make_sessionmaker(db_engine)
        recorder = Recorder(hub, app.state.db, database_url=settings.database_url)
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
        try:
            yield
        finally:
            if service is not None:
                service.stop()
            await asyncio.sleep(0)  # let the engine thread's last hops land
            if relay is not None:
                await relay.stop()
            await recorder.stop()
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
        forensics,
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
    async def healthz() -> dict[str, object]:
        service = app.state.service
        recorder = getattr(app.state, "recorder", None)
        return {
            "ok": True,
            "engine": bool(service and service.core and service.core.alive),
            "session": hub.live_session,
            "recorder": recorder.status() if recorder else None,
            "relay": app.state.relay.status() if getattr(app.state, "relay", None) else None,
        }

    return app
