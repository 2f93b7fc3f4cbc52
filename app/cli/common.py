"""What every `batchscope` command shares: the user-error type, the database a command
reads, and the runner it builds. Imports no other command module."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.cli.help import from_env

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

EXIT_USAGE = 2


class CliError(Exception):
    """A user error: printed as `batchscope: error: ...`, exit code 2."""


def add_database_flag(p: argparse.ArgumentParser) -> None:
    from_env(
        p.add_argument("--database-url", dest="database_url", metavar="URL", help="the database"),
        "database_url",
    )


def database_url(args: argparse.Namespace) -> str:
    if getattr(args, "database_url", None):
        return str(args.database_url)
    from app.settings import Settings

    return Settings(runner="sim").database_url


def open_db(args: argparse.Namespace) -> sessionmaker[Session]:
    """Sessions on the command's database, which must be migrated already."""
    from app.db.migrate import NotMigrated, require_migrated
    from app.db.session import make_engine, make_sessionmaker

    url = database_url(args)
    try:
        require_migrated(url)
    except NotMigrated as exc:
        raise CliError(str(exc)) from None
    return make_sessionmaker(make_engine(url))


def add_runner_flags(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--runner", choices=("sim", "torch"), default=default)
    p.add_argument("--model", metavar="DIR", help="local Llama-family checkpoint directory")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")


def make_runner_from_args(args: argparse.Namespace, config: Any) -> Any:
    from engine.runner import make_runner

    if args.runner == "sim":
        if args.model:
            raise CliError("--model needs --runner torch")
        cost_path = getattr(args, "cost_model", None)
        if cost_path:
            return make_runner("sim", config, cost_model=load_cost_model(cost_path))
        return make_runner("sim", config)
    options: dict[str, Any] = {"device": args.device}
    if args.model:
        options["model_dir"] = args.model
    try:
        return make_runner("torch", config, **options)
    except (ValueError, OSError, RuntimeError) as exc:
        raise CliError(str(exc)) from None


def load_cost_model(path: str) -> Any:
    from engine.runner.sim import CostModel

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return CostModel(
            **{
                k: float(data[k])
                for k in ("base_ms", "per_token_ms", "per_seq_ms", "per_context_ms")
            }
        )
    except OSError as exc:
        raise CliError(f"--cost-model {path}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise CliError(f"--cost-model {path}: not a cost model file ({exc})") from None
