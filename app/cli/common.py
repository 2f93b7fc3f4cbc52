"""What every `batchscope` command shares: the user-error type, the database a command
reads, and the runner it builds. Imports no other command module."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
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


def load_cost_model(spec: str) -> Any:
    """A preset (`h100:llama-3-8b`) or a file from `batchscope calibrate` (linear or
    --roofline)."""
    from engine.runner.cost_model import load_cost_model as load

    try:
        return load(spec)
    except ValueError as exc:
        raise CliError(f"--cost-model: {exc}") from None


def add_loop_flags(p: argparse.ArgumentParser) -> None:
    """The engine-loop knobs (override a scenario's or the settings' values)."""
    p.add_argument(
        "--async-scheduling",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="vLLM's async scheduling (batch queue of 2); default: the scenario's / off",
    )
    p.add_argument(
        "--num-speculative-tokens",
        type=int,
        metavar="K",
        default=None,
        help="n-gram speculative decoding with K drafts per step (0 = off)",
    )
    p.add_argument(
        "--batching",
        choices=("continuous", "static"),
        default=None,
        help="continuous (vLLM) or static batching (the baseline)",
    )
    add_vllm_version_flag(p, "default: the scenario's / the newest")


def add_vllm_version_flag(p: argparse.ArgumentParser, default_text: str) -> None:
    from engine.releases import SUPPORTED

    p.add_argument(
        "--vllm-version",
        type=_release,
        default=None,
        metavar="RELEASE",
        help=f"the vLLM release to decide as, {SUPPORTED[0]} to {SUPPORTED[-1]} "
        f"(a patch release runs as its minor; docs/vllm_releases.md); {default_text}",
    )


def _release(text: str) -> str:
    """'0.27', '0.27.1' or 'v0.27' -> '0.27'; argparse's error (exit 2) for another."""
    from engine.releases import normalize_version

    try:
        return normalize_version(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def loop_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The engine-loop knobs given on the command line, by knob name."""
    out: dict[str, Any] = {}
    for name in ("async_scheduling", "num_speculative_tokens", "batching", "vllm_version"):
        value = getattr(args, name, None)
        if value is not None:
            out[name] = value
    return out


def runner_from_settings(settings: Any, config: Any) -> Any:
    """The runner Settings ask for (`runner`, `model`, `device`), for `config`."""
    options = argparse.Namespace(
        runner=settings.runner, model=settings.model, device=settings.device
    )
    return make_runner_from_args(options, config)


def check_trace_workload(settings: Any) -> Any:
    """`--workload trace:FILE`: the trace checked (app.nodes.trace_workload; None for
    another workload); a trace that cannot be used is a CliError naming its line."""
    from app.nodes.trace_workload import load_trace_workload
    from engine.mooncake import TraceError

    path = settings.workload_trace()
    if path is None:
        return None
    try:
        return load_trace_workload(path, settings.engine_config(), settings.trace_block_tokens)
    except TraceError as exc:
        raise CliError(f"--workload trace:{path}: {exc}") from None
    except OSError as exc:
        raise CliError(f"--workload trace:{path}: cannot read the file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise CliError(f"--workload trace:{path}: not a UTF-8 text file") from None


def run_until_signalled(body: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """asyncio.run(body(stop)), where `stop` is set by SIGINT or SIGTERM: an engine
    process (linked to `serve`, pushing, or on the bus). Its garbage is collected on a
    clock (engine.gc_clock): counted collections walked the scheduler's queue (a quarter of
    the engine process with 100,000 requests waiting)."""
    import signal

    from engine.gc_clock import GcClock

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        gc_clock = GcClock()
        ticking = asyncio.create_task(gc_clock.ticking())
        try:
            await body(stop)
        finally:
            ticking.cancel()
            gc_clock.stop()

    asyncio.run(main())
