"""Where the pages link a session to: its live view or the replay of its recording."""

from __future__ import annotations

from urllib.parse import quote

from app.live.hub import EventHub


def replay_href(session: str) -> str:
    return "/?session=" + quote(session, safe="")


def session_href(hub: EventHub, session: str, live: bool) -> str:
    """A live session opens live (`/` for the current one, else `/?live=ID`); any other
    opens the replay of its recording."""
    if live:
        if session == hub.live_session:
            return "/"
        return "/?live=" + quote(session, safe="")
    return replay_href(session)
