"""`batchscope db upgrade|downgrade|current` (Alembic migrations) and `batchscope sessions`
(the recorded sessions)."""

from __future__ import annotations

import argparse
import json
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

    sessions = sub.add_parser("sessions", help="list recorded sessions")
    sessions.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_database_flag(sessions)
    sessions.set_defaults(run=cmd_sessions)


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
