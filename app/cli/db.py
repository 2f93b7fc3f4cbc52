"""`batchscope db upgrade|downgrade|current` (Alembic migrations) and `batchscope sessions`
(the recorded sessions)."""

from __future__ import annotations

import argparse
import json
import re
import time

from app.cli.common import CliError, add_database_flag, database_url, open_db


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    db = sub.add_parser("db", help="database schema (Alembic migrations)")
    db.add_argument("action", choices=("upgrade", "downgrade", "current"))
    add_database_flag(db)
    db.add_argument(
        "--revision", help="target revision (default: head to upgrade, base to downgrade)"
    )
    db.set_defaults(run=cmd_db)

    sessions = sub.add_parser("sessions", help="list recorded sessions, or prune old ones")
    sessions.add_argument("action", nargs="?", choices=("list", "prune"), default="list")
    sessions.add_argument("--json", action="store_true", help="print JSON instead of a table")
    sessions.add_argument(
        "--older-than",
        metavar="AGE",
        type=parse_age,
        help="prune: ended sessions started longer ago than AGE (e.g. 30d, 12h, 90m)",
    )
    sessions.add_argument(
        "--max-size",
        metavar="SIZE",
        type=parse_size,
        help="prune: then the oldest ended sessions until recordings store at most SIZE "
        "(e.g. 500MB, 2GB)",
    )
    sessions.add_argument("--dry-run", action="store_true", help="prune: only say what would go")
    add_database_flag(sessions)
    sessions.set_defaults(run=cmd_sessions)


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZE_UNITS = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 1024, "mib": 1 << 20, "gib": 1 << 30}


def parse_age(text: str) -> float:
    """`30d`, `12h`, `90m`, `45s`, `2w` in seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text.lower())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r}: an age like 30d, 12h, 90m")
    return float(match[1]) * _AGE_UNITS[match[2]]


def parse_size(text: str) -> int:
    """`500MB`, `2GB`, `100MiB` in bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmg]?i?b)\s*", text.lower())
    if not match or match[2] not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"{text!r}: a size like 500MB, 2GB")
    return int(float(match[1]) * _SIZE_UNITS[match[2]])


def cmd_db(args: argparse.Namespace) -> int:
    from app.db import migrate

    url = database_url(args)
    try:
        if args.action == "upgrade":
            migrate.upgrade(url, args.revision or "head")
        elif args.action == "downgrade":
            migrate.downgrade(url, args.revision or "base")
        print(f"{url}: at revision {migrate.current_revision(url) or '(empty)'}")
    except Exception as exc:  # a bad URL, an unreachable server, a bad revision
        raise CliError(f"database {url}: {exc}") from None
    return 0


def cmd_sessions(args: argparse.Namespace) -> int:
    from app.db.queries import list_sessions

    if args.action == "prune":
        return cmd_prune(args)
    if args.older_than is not None or args.max_size is not None:
        raise CliError("--older-than and --max-size go with `sessions prune`")

    with open_db(args)() as db:
        rows = list_sessions(db)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'id':<28} {'name':<24} {'source':<8} {'steps':>7} {'requests':>8}  started")
    for r in rows:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["started_at"]))
        print(
            f"{r['id']:<28} {r['name'][:24]:<24} {r['source'][:8]:<8} {r['steps']:>7} "
            f"{r['requests']:>8}  {started}"
        )
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    from app.db.retention import compact, prune

    if args.older_than is None and args.max_size is None:
        raise CliError("prune needs --older-than AGE and/or --max-size SIZE")
    sessions = open_db(args)
    result = prune(sessions, args.older_than, args.max_size, dry_run=args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    print(
        f"{verb} {len(result.sessions)} ended sessions ({result.freed_bytes / 1e6:.1f} MB); "
        f"recordings store {result.stored_bytes / 1e6:.1f} MB"
    )
    for sid in result.sessions:
        print(f"  {sid}")
    if result.sessions and not args.dry_run:
        bind = sessions.kw["bind"]
        if not compact(bind):
            print("note: the database is busy; the freed space is reused, not returned")
    return 0
