"""Control token, launch cookie and Origin/Host checks (DESIGN §7)."""

from __future__ import annotations

import hmac
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import HTTPException, Request, Security, WebSocket
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer

COOKIE = "batchscope_token"
UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}
"""RFC 6750: a 401 names the scheme that would be accepted."""

# Declared for the OpenAPI document (Swagger's "Authorize" button); the check itself is
# presented_token(), which reads either.
bearer = HTTPBearer(
    auto_error=False,
    scheme_name="token",
    description="The control token `batchscope serve` prints at start (or BATCHSCOPE_TOKEN).",
)
cookie = APIKeyCookie(
    name=COOKIE,
    auto_error=False,
    scheme_name="cookie",
    description="Set by opening the launch URL printed at start.",
)
BearerDoc = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]
CookieDoc = Annotated[str | None, Security(cookie)]


def token_matches(settings_token: str, given: str | None) -> bool:
    return bool(given) and hmac.compare_digest(settings_token.encode(), str(given).encode())


def presented_token(conn: Request | WebSocket) -> str | None:
    auth = conn.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return conn.cookies.get(COOKIE)


def bearer_matches(conn: Request | WebSocket) -> bool:
    """The token in an Authorization header (programs: ingest), never from the cookie."""
    auth = conn.headers.get("authorization", "")
    given = auth[7:].strip() if auth.lower().startswith("bearer ") else None
    return token_matches(conn.app.state.settings.token, given)


def origin_allowed(conn: Request | WebSocket) -> bool:
    """No Origin (non-browser clients) or an Origin whose host:port is the Host we serve."""
    origin = conn.headers.get("origin")
    if origin is None:
        return True
    host = conn.headers.get("host", "")
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc == host


def has_control(request: Request) -> bool:
    token = request.app.state.settings.token
    return token_matches(token, presented_token(request))


async def require_control(
    request: Request,
    _bearer: BearerDoc,
    _cookie: CookieDoc,
) -> None:
    """Dependency for every state-changing route."""
    if not origin_allowed(request):
        raise HTTPException(403, "cross-origin control requests are refused")
    if not has_control(request):
        raise HTTPException(
            401,
            "this action needs the control token (open the launch URL "
            "printed at start, or send Authorization: Bearer TOKEN)",
            headers=UNAUTHORIZED,
        )


async def require_view(
    request: Request,
    _bearer: BearerDoc,
    _cookie: CookieDoc,
) -> None:
    settings = request.app.state.settings
    if settings.view_open and settings.is_loopback:
        return
    if not has_control(request):
        raise HTTPException(401, "viewing this dashboard needs the token", headers=UNAUTHORIZED)
