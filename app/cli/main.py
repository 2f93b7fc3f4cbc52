"""The `batchscope` command line: one parser, each command registered by its own module
(which never imports this one).

Bad input gets one clear message on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from app.cli import db, push, records, serve, simulate, sweep, trace, vllm_check
from app.cli.common import EXIT_USAGE, CliError
from app.cli.help import Parser
from app.resources import package_version


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="batchscope", description="See how an LLM-serving scheduler works.")
    parser.add_argument("--version", action="version", version=f"batchscope {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in (simulate, sweep, push, db, records, trace, serve, vllm_check):
        module.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
        return code
    except CliError as exc:
        print(f"batchscope: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
