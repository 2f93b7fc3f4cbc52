"""What every `batchscope ... --help` shows the same way: each option's default and the
environment variable that sets it, and `batchscope --version`.

Every subcommand's parser is a `Parser` (main.py passes it as the subparsers' class), so a
new command gets this without doing anything. An option read through Settings says so
with `from_env(action, field)`.
"""

from __future__ import annotations

import argparse
from typing import Any

ENV_PREFIX = "BATCHSCOPE_"
ENV_NAMES = {"database_url": "DATABASE_URL"}
"""Settings fields whose environment variable is not BATCHSCOPE_<FIELD>."""


def env_name(field: str) -> str:
    return ENV_NAMES.get(field, ENV_PREFIX + field.upper())


def from_env(action: argparse.Action, field: str, shown_default: Any = None) -> argparse.Action:
    """Mark `action` as read through Settings.`field`: its help names the environment
    variable, and the default shown is the setting's (the option's own stays None, so
    an unset option leaves the environment in charge)."""
    if shown_default is None:
        from app.settings import Settings

        shown_default = Settings.model_fields[field].default
    action.env = env_name(field)  # type: ignore[attr-defined]
    action.shown_default = shown_default  # type: ignore[attr-defined]
    return action


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Appends `(default: X; env: NAME)` to every option that has either."""

    def _format_action(self, action: argparse.Action) -> str:
        if not (action.help or "").strip() and _notes(action):
            # argparse leaves out a blank help, and with it the notes: they become the help.
            action.help = _notes(action).replace("%", "%%")
            action.notes_shown = True  # type: ignore[attr-defined]
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        notes = _notes(action)
        if not notes or getattr(action, "notes_shown", False):
            return text
        return f"{text} {notes.replace('%', '%%')}"


def _notes(action: argparse.Action) -> str:
    """`(default: X; env: NAME)` for an option, or ''."""
    if action.help == argparse.SUPPRESS or isinstance(
        action, argparse._HelpAction | argparse._VersionAction
    ):
        return ""
    notes = []
    default = getattr(action, "shown_default", action.default)
    if default not in (None, False, argparse.SUPPRESS, "") and (
        action.option_strings or action.nargs in ("?", "*")
    ):
        notes.append(f"default: {default}")
    env = getattr(action, "env", None)
    if env:
        notes.append(f"env: {env}")
    return "(" + "; ".join(notes) + ")" if notes else ""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser with HelpFormatter unless told otherwise."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
