"""`batchscope import-trace`: a Mooncake-style JSONL trace (one request a line) as a
scenario file (engine/mooncake.py), arrivals at their timestamps."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from app.cli.common import CliError


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "import-trace",
        help="turn a Mooncake JSONL trace into a scenario file",
        description="Each line {timestamp (ms), input_length, output_length, hash_ids} "
        "becomes a request arriving at its timestamp; requests sharing hash ids share those "
        "blocks' tokens exactly; output_length becomes max_tokens.",
    )
    p.add_argument("file", metavar="FILE", help="the trace (JSONL)")
    p.add_argument("--format", choices=("mooncake",), default="mooncake")
    p.add_argument(
        "--block-tokens", type=int, default=512, metavar="N", help="tokens per hash id block"
    )
    p.add_argument(
        "--max-model-len",
        type=int,
        metavar="N",
        help="refuse requests longer than this (prompt + outputs); default: room for the "
        "longest, written into the scenario's config",
    )
    p.add_argument("--out", metavar="SCENARIO.json", help="write here instead of stdout")
    p.set_defaults(run=cmd_import_trace)


def cmd_import_trace(args: argparse.Namespace) -> int:
    from engine.mooncake import TraceError, read_trace, trace_config, trace_scenario

    if args.block_tokens < 1:
        raise CliError("--block-tokens: must be at least 1")
    if args.max_model_len is not None and args.max_model_len < 2:
        raise CliError("--max-model-len: must be at least 2")
    try:
        rows = read_trace(args.file, args.block_tokens, args.max_model_len)
    except TraceError as exc:
        raise CliError(f"{args.file}: {exc}") from None
    except OSError as exc:
        raise CliError(f"cannot read {args.file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise CliError(f"{args.file}: not a UTF-8 text file") from None
    config = trace_config(rows)
    if args.max_model_len is not None:
        config["max_model_len"] = args.max_model_len
    scenario = trace_scenario(rows, args.block_tokens, Path(args.file).stem, config)
    text = json.dumps(scenario, separators=(",", ":")) + "\n"
    if not args.out:
        sys.stdout.write(text)
        return 0
    out = Path(args.out)
    tmp = out.with_name(out.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CliError(f"cannot write {out}: {exc.strerror}") from None
    print(f"{len(rows)} requests written to {out}", file=sys.stderr)
    return 0
