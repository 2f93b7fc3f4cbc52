"""create_app(): routers, static files, lifespan (hub -> engine process; reverse on stop)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from app.api_docs import TAGS, install_openapi
from app.bus.fleet import FleetView
from app.bus.intake import BusIntake
from app.db.lifecycle import describe_orphan, mark_ended, mark_orphans
from app.db.private import ServingDatabase
from app.deps import install_error_handlers
from app.edge.hosts import AllowedHosts
from app.edge.loop_demand import CountConnections, LoopDemand
from app.edge.middleware import EdgeMiddleware
from app.lab.background import LabWorker
from app.live.health import Check, HealthRegistry, database_check
from app.live.hub import EventHub
from app.live.metrics import Metrics
from app.live.relay import PgRelay
from app.nodes.ingest import NodeRegistry, watch_vanished
from app.nodes.local_engine import LocalEngine
from app.records.recorder import Recorder
from app.records.retention import enforce_cap
from app.resources import asset_path, package_version
from app.routes import (
    compare,
    control,
    dashboard,
    docs,
    engine,
    export,
    fleet,
    forensics,
    guide,
    health,
    ingest,
    lab,
    lab_api,
    live,
    metrics,
    nodes,
    scenarios,
    sessions,
    ws,
)
from app.security import COOKIE, token_matches
from app.settings import Settings, get_settings
from engine.gc_clock import GcClock

SHUTDOWN_DRAIN_S = 20.0
"""How long a shutdown keeps retrying a database that is away before giving up."""
STEP_BOUND_S = 30.0
"""At most this long for each other step of a shutdown: a stuck part is left behind
(logged), never waited on forever. See `_shutdown` for each step's bound."""
LAB_STOP_S = 60.0
"""Running sweep points finish (kept) within this; later ones are cut off."""
log = logging.getLogger("batchscope")
T = TypeVar("T")
API_DESCRIPTION = """\
The dashboard's JSON API. Reading is open on a loopback bind; every action (and reading
elsewhere) needs the control token `batchscope serve` prints at start: press
**Authorize** and paste it as the bearer token, or open the launch URL once (it sets a
cookie). Bodies are JSON or form data. Every error answers with one body:
`{"detail": "...", "errors": [{"loc": [...], "msg": "...", "type": "..."}]}`.
"""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Start order: database -> hub -> recorder -> engine process; reverse on shutdown.
        database = ServingDatabase(settings.database_url)
        await asyncio.to_thread(database.prepare)
        app.state.db = database.sessions()
        for orphan in await asyncio.to_thread(mark_orphans, app.state.db):
            log.warning("%s", describe_orphan(orphan))
        recorder = _recorder(hub, app.state.db, database)
        recorder.on_rejected.append(app.state.nodes.on_rejected)
        app.state.recorder = recorder
        recorder.start()
        relay = None
        is_pg = settings.database_url.startswith("postgres")
        if settings.relay == "on" or (settings.relay == "auto" and is_pg):
            relay = PgRelay(hub, settings.database_url)
            await relay.start()
        app.state.relay = relay
        bus = _bus_intake(app, settings, recorder)
        if bus is not None:
            await bus.start()
        app.state.bus = bus
        app.state.lab = LabWorker(app.state.db)
        app.state.lab.start()
        _register_health(app, settings, recorder, relay)
        local: LocalEngine | None = app.state.local_engine
        if local is not None:
            await local.start()
        # What startup built (modules, routes, models) lives as long as the process: out of
        # the collector's way, so a full collection scans only what the sessions hold; and
        # full collections on a clock, not every few seeks (engine.gc_clock).
        gc.collect()
        gc.freeze()
        gc_clock = GcClock()
        collecting = asyncio.create_task(gc_clock.ticking())
        vanished = asyncio.create_task(
            watch_vanished(app.state.nodes, app.state.db, settings.node_gone_after_s)
        )
        cap = None
        if settings.max_recordings_mb > 0:
            max_bytes = int(settings.max_recordings_mb * 1e6)
            cap = asyncio.create_task(enforce_cap(app.state.db, hub, max_bytes))
        try:
            yield
        finally:
            vanished.cancel()
            if cap is not None:
                cap.cancel()
            await _shutdown(app, local, relay, bus, recorder)
            database.remove()
            collecting.cancel()
            gc_clock.stop()

    app = FastAPI(
        title="batchscope",
        version=package_version(),
        description=API_DESCRIPTION,
        openapi_tags=TAGS,
        lifespan=lifespan,
        docs_url=None,  # app.routes.docs serves Swagger UI from static/vendor
        redoc_url=None,
    )
    install_openapi(app)
    hub = EventHub()
    app.state.settings = settings
    app.state.hub = hub
    app.state.metrics = Metrics(hub)
    app.state.nodes = NodeRegistry(hub)
    app.state.fleet = FleetView()
    demand = app.state.loop_demand = LoopDemand()
    app.state.bus = None
    app.state.local_engine = (
        LocalEngine(settings, hub, app.state.nodes, demand.wanted) if settings.engine else None
    )
    app.state.health = HealthRegistry()
    hub.follow_most_active = not settings.engine

    for module in (
        control,
        engine,
        scenarios,
        live,
        forensics,
        sessions,
        compare,
        export,
        nodes,
        fleet,
        ingest,
        ws,
        metrics,
        health,
        docs,
        guide,
        dashboard,
        lab,
        lab_api,
    ):
        app.include_router(module.router)
    install_error_handlers(app)
    app.add_middleware(EdgeMiddleware, hosts=AllowedHosts(settings.host, settings.allowed_hosts))
    app.add_middleware(CountConnections, demand=demand)
    app.mount("/static", StaticFiles(directory=asset_path("static")), name="static")

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

    return app


async def _shutdown(
    app: FastAPI,
    local: LocalEngine | None,
    relay: PgRelay | None,
    bus: BusIntake | None,
    recorder: Recorder,
) -> None:
    """Ordered, bounded shutdown (SIGINT/SIGTERM; uvicorn has closed the sockets):
    1. intake stops: the bus takes no more messages (30 s), the relay stops (30 s);
    2. producers stop, together: the engine process (its last frames land; 30 s) and the
       lab (running points finish and are kept; 60 s + 30 s);
    3. the recorder writes everything taken (retrying a database that is away for 20 s,
       then up to 30 s more for a write in progress) and ends its writer;
    4. the bus acks only what the recorder wrote, and leaves (30 s);
    5. the sessions this process recorded and left open are marked ended (30 s).
    Worst case about 4 minutes; a clean stop takes seconds."""
    if bus is not None:
        await _bounded("bus intake", bus.stop_intake(), STEP_BOUND_S)
    if relay is not None:
        await _bounded("relay", relay.stop(), STEP_BOUND_S)
    lab: LabWorker = app.state.lab
    producers = [asyncio.to_thread(lab.stop, LAB_STOP_S)]
    if local is not None:
        producers.append(local.stop())  # its last frames land before it is marked exited
    await _bounded("producers", asyncio.gather(*producers), LAB_STOP_S + STEP_BOUND_S)
    drained = await _bounded(
        "recorder", recorder.stop(timeout=SHUTDOWN_DRAIN_S), SHUTDOWN_DRAIN_S + STEP_BOUND_S
    )
    if not drained:
        log.error("shutdown: %d frames could not be written", recorder.lag)
    if bus is not None:
        await _bounded("bus acks", bus.close(), STEP_BOUND_S)
    ended = await _bounded(
        "end marks",
        asyncio.to_thread(mark_ended, app.state.db, recorder.sessions_seen, "shutdown"),
        STEP_BOUND_S,
    )
    if ended is None:
        log.error("shutdown: the recorded sessions could not be marked ended")


async def _bounded(what: str, step: Awaitable[T], seconds: float) -> T | None:
    """Await one shutdown step for at most `seconds`; None (logged) if it failed or hung."""
    try:
        return await asyncio.wait_for(step, seconds)
    except TimeoutError:
        log.error("shutdown: %s did not finish within %g s; going on without it", what, seconds)
    except Exception:
        log.exception("shutdown: %s failed", what)
    return None


def _bus_intake(app: FastAPI, settings: Settings, recorder: Recorder) -> BusIntake | None:
    """With a bus URL: this dashboard's durable consumers of the fleet (app/bus)."""
    if not settings.bus:
        return None
    name = settings.bus_name()
    limits = (settings.bus_max_age_s, int(settings.bus_max_mb * 1e6))
    return BusIntake(
        settings.bus, name, app.state.nodes, recorder, app.state.db, app.state.fleet, limits
    )


def _recorder(hub: EventHub, db: sessionmaker[Session], database: ServingDatabase) -> Recorder:
    """A file or server database is written by a writer process; a private one in a thread
    of this process, on its own connections (ServingDatabase.sessions)."""
    if not database.private:
        return Recorder(hub, db, database_url=database.url)
    return Recorder(hub, database.sessions(writer=True))


def _register_health(
    app: FastAPI, settings: Settings, recorder: Recorder, relay: PgRelay | None
) -> None:
    """What /healthz asks (app.live.health): the engine, the recorder, the database."""
    registry: HealthRegistry = app.state.health
    local: LocalEngine | None = app.state.local_engine
    nodes: NodeRegistry = app.state.nodes
    if local is not None:
        registry.register("engine", local.health)
    else:
        registry.register("engine", lambda: _nodes_check(nodes))
    registry.register("recorder", lambda: recorder.health(settings.health_recorder_max_lag_s))
    sessions = app.state.db

    def ping() -> None:
        with sessions() as s:
            s.execute(text("SELECT 1"))

    registry.register("database", lambda: database_check(ping, registry.timeout_s))
    if relay is not None:
        registry.register(
            "relay",
            lambda: Check(
                relay.healthy(),
                f"PostgreSQL relay {'connected' if relay.healthy() else 'reconnecting'}",
                relay.status(),
            ),
        )


def _nodes_check(nodes: NodeRegistry) -> Check:
    views = nodes.views()
    connected = sum(1 for v in views if v["state"] == "live")
    return Check(
        True,
        f"no local engine (--no-engine); {connected} of {len(views)} nodes connected",
        {"nodes": len(views), "connected": connected},
    )
