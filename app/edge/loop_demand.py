"""Who else wants the web process's event loop right now: the HTTP requests being answered
and the websockets open (viewers, a node's link), counted by a pure ASGI middleware. The
local engine's frame intake keeps to its share of the loop (app.nodes.link_intake's
DutyCycle) only while someone does; with nobody connected it takes the engine's frames as
fast as they come, and a flat-out simulation no longer waits on a loop resting for
nobody. It still yields the loop after every turn, so a new connection is taken at once
and the share applies from its first request."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send


class LoopDemand:
    def __init__(self) -> None:
        self.open = 0
        """HTTP requests in progress and websockets open (the loop's own thread only)."""

    def wanted(self) -> bool:
        return self.open > 0


class CountConnections:
    """ASGI middleware: each HTTP request (until its response is sent) and each
    websocket (until it closes) counts in `demand`."""

    def __init__(self, app: ASGIApp, demand: LoopDemand) -> None:
        self.app = app
        self.demand = demand

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        self.demand.open += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.demand.open -= 1
