"""Errors any layer may raise that the web maps to a status once (app.deps)."""

from __future__ import annotations


class NotFound(LookupError):
    """What was asked for (a recorded session, a live request, a scenario...) does not
    exist: 404, as JSON, an htmx flash or the not-found page (app.deps)."""
