"""`batchscope export` and `batchscope import`: recordings out to files and back."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from app.cli.common import CliError, add_database_flag, open_db


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `export` and `import` on the `batchscope` subparsers."""
    export = sub.add_parser("export", help="write a recorded session to a file (or stdout)")
    export.add_argument("session", metavar="SESSION", help="session id (see `sessions`)")
    export.add_argument(
        "--format",
        choices=("perfetto", "jsonl", "mooncake"),
        default="jsonl",
        help="perfetto: Chrome JSON trace for ui.perfetto.dev; jsonl: the protocol frames; "
        "mooncake: the arrivals as a Mooncake JSONL trace (timestamp, lengths, hash_ids)",
    )
    export.add_argument(
        "--block-tokens",
        type=int,
        default=512,
        metavar="N",
        help="mooncake: tokens per hash id block",
    )
    export.add_argument("--out", metavar="FILE", help="write here instead of stdout")
    add_database_flag(export)
    export.set_defaults(run=cmd_export)

    imp = sub.add_parser("import", help="bring back a session exported as JSONL")
    imp.add_argument("file", metavar="FILE.jsonl")
    add_database_flag(imp)
    imp.set_defaults(run=cmd_import)


@contextmanager
def _output(out: str | None) -> Iterator[TextIO]:
    """stdout, or a temporary file moved over `out` only once it is complete."""
    if not out:
        yield sys.stdout
        sys.stdout.flush()
        return
    path = Path(out)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            yield fh
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CliError(f"cannot write {path}: {exc.strerror}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def cmd_export(args: argparse.Namespace) -> int:
    from app.db.queries import get_session
    from app.errors import NotFound
    from app.records.export import export_jsonl, perfetto_trace
    from app.records.mooncake import mooncake_lines

    if args.block_tokens < 1:
        raise CliError("--block-tokens: must be at least 1")

    with open_db(args)() as db:
        try:
            get_session(db, args.session)
        except NotFound as exc:
            raise CliError(str(exc)) from None
        lines: Iterator[str] = iter(())
        if args.format == "mooncake":
            try:
                lines = mooncake_lines(db, args.session, args.block_tokens)
            except ValueError as exc:  # a block size this recording cannot give
                raise CliError(str(exc).replace("block_tokens", "--block-tokens", 1)) from None
        with _output(args.out) as fh:
            if args.format == "jsonl":
                frames = export_jsonl(db, args.session, fh)
            elif args.format == "mooncake":
                frames = 0
                for frames, line in enumerate(lines, start=1):  # noqa: B007
                    fh.write(line)
            else:
                trace = perfetto_trace(db, args.session)
                json.dump(trace, fh, separators=(",", ":"))
                fh.write("\n")
                frames = -1
    if args.out:
        unit = "requests" if args.format == "mooncake" else "frames"
        what = f"{frames} {unit}" if frames >= 0 else "Perfetto trace"
        print(f"session {args.session}: {what} written to {args.out}", file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from app.records.importer import ImportFormatError, import_jsonl

    sessions = open_db(args)
    try:
        session_id = import_jsonl(sessions, args.file)
    except ImportFormatError as exc:
        raise CliError(f"{args.file}: {exc}") from None
    except OSError as exc:
        raise CliError(f"cannot read {args.file}: {exc.strerror}") from None
    print(f"imported session {session_id} from {args.file}")
    return 0
