"""The `batchscope` command line.

Bad input gets one clear message on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXIT_USAGE = 2


class CliError(Exception):
    """A user error: printed as `batchscope: error: ...`, exit code 2."""


def _add_runner_flags(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--runner", choices=("sim", "torch"), default=default)
    p.add_argument("--model", metavar="DIR", help="local Llama-family checkpoint directory")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="batchscope", description="See how an LLM-serving scheduler works."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser("simulate", help="run a scenario file step by step")
    sim.add_argument("file", help="scenario JSON (see docs/scenarios.md)")
    sim.add_argument("--out", metavar="RESULT.json", help="write the step-by-step result here")
    sim.add_argument("--table", action="store_true", help="print the seed-style step table")
    sim.add_argument("--cost-model", metavar="FILE", help="SimRunner cost model (from calibrate)")
    _add_runner_flags(sim, default="sim")

    cal = sub.add_parser("calibrate", help="fit the SimRunner's cost model on the torch runner")
    cal.add_argument("--out", metavar="FILE", default="data/cost_model.json")
    cal.add_argument("--model", metavar="DIR", help="local Llama-family checkpoint directory")
    cal.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    cal.add_argument("--repeats", type=int, default=3)

    eng = sub.add_parser("engine", help="run the engine headless and push frames to a dashboard")
    eng.add_argument(
        "--push",
        required=True,
        metavar="WS_URL",
        help="the dashboard's ingest socket, e.g. ws://127.0.0.1:8000/ws/ingest",
    )
    eng.add_argument("--token", required=True, help="the dashboard's control token")
    eng.add_argument("--node", default=None, help="node name shown in the dashboard")
    eng.add_argument("--runner", choices=("sim", "torch"))
    eng.add_argument("--model", metavar="DIR")
    eng.add_argument("--device", choices=("auto", "cpu", "cuda"))
    eng.add_argument("--workload", choices=("poisson", "none"))
    eng.add_argument(
        "--buffer",
        type=int,
        default=20_000,
        help="frames kept for resending while the dashboard is away",
    )

    db = sub.add_parser("db", help="database schema (Alembic migrations)")
    db.add_argument("action", choices=("upgrade", "downgrade", "current"))
    db.add_argument("--database-url", dest="database_url")
    db.add_argument("--revision", help="target revision (default head / base)")

    sessions = sub.add_parser("sessions", help="list recorded sessions")
    sessions.add_argument("--json", action="store_true")
    sessions.add_argument("--database-url", dest="database_url")

    add_record_commands(sub)

    serve = sub.add_parser("serve", help="start the dashboard with the embedded engine")
    serve.add_argument("--host", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    serve.add_argument("--runner", choices=("sim", "torch"))
    serve.add_argument("--model", metavar="DIR", help="local Llama-family checkpoint directory")
    serve.add_argument("--device", choices=("auto", "cpu", "cuda"))
    serve.add_argument("--workload", choices=("poisson", "none"))
    serve.add_argument("--database-url", dest="database_url")
    serve.add_argument("--token", help="control token (default: generated at start)")
    serve.add_argument(
        "--no-engine",
        dest="engine",
        action="store_false",
        default=None,
        help="observe remote nodes only; no local engine",
    )
    return parser


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


def cmd_calibrate(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from engine.config import CacheConfig, EngineConfig, SchedulerConfig
    from engine.runner.calibrate import calibrate

    if args.repeats < 1:
        raise CliError("--repeats: must be >= 1")
    config = EngineConfig(
        SchedulerConfig(max_num_batched_tokens=4096, max_num_seqs=64, max_model_len=4096),
        CacheConfig(block_size=16, num_gpu_blocks=1025),
    )
    args.runner = "torch"
    runner = make_runner_from_args(args, config)
    model = calibrate(runner, repeats=args.repeats)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {**asdict(model), "runner": runner.describe()}
    out.write_text(json.dumps(payload, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"cost model written to {out}: {asdict(model)}")
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from engine.scenario import ScenarioError, load_scenario
    from engine.simulate import format_table, run_scenario

    try:
        scenario = load_scenario(args.file)
    except ScenarioError as exc:
        raise CliError(str(exc)) from None
    runner = make_runner_from_args(args, scenario.config)
    result = run_scenario(scenario, runner)
    if args.out:
        out = Path(args.out)
        tmp = out.with_name(out.name + ".tmp")
        try:
            tmp.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
            tmp.replace(out)
        except OSError as exc:
            raise CliError(f"cannot write {out}: {exc.strerror}") from None
    if args.table or not args.out:
        print(format_table(result))
    return 0


def database_url(args: argparse.Namespace) -> str:
    if getattr(args, "database_url", None):
        return str(args.database_url)
    from app.settings import Settings

    return Settings(runner="sim").database_url


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


def _open_db(args: argparse.Namespace) -> Any:
    from app.db.migrate import current_revision, head_revision
    from app.db.session import make_engine, make_sessionmaker

    url = database_url(args)
    try:
        if current_revision(url) != head_revision():
            raise CliError(f"database {url} is not migrated: run `batchscope db upgrade`")
    except CliError:
        raise
    except Exception as exc:
        raise CliError(f"cannot open the database {url}: {exc}") from None
    return make_sessionmaker(make_engine(url))


def cmd_sessions(args: argparse.Namespace) -> int:
    import time

    from app.db.queries import list_sessions

    with _open_db(args)() as db:
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


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from app.main import create_app
    from app.settings import Settings
    from engine.config import ConfigError

    overrides = {
        key: getattr(args, key)
        for key in (
            "host",
            "port",
            "runner",
            "model",
            "device",
            "workload",
            "database_url",
            "token",
            "engine",
        )
        if getattr(args, key) is not None
    }
    try:
        settings = Settings(**overrides)
        settings.engine_config()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CliError(f"{where}: {first['msg']}") from None
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    if settings.model and not Path(settings.model).is_dir():
        raise CliError(f"--model {settings.model}: no such directory")
    if settings.runner == "torch":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise CliError("the torch runner needs torch (pip install torch==2.13.0)") from None
    from app.db.migrate import current_revision, head_revision, is_memory_url

    if not is_memory_url(settings.database_url):
        try:
            revision = current_revision(settings.database_url)
        except Exception as exc:
            raise CliError(f"cannot open the database {settings.database_url}: {exc}") from None
        if revision != head_revision():
            raise CliError(
                "the database is not at the latest schema: run "
                "`batchscope db upgrade` first (make run does)"
            )
    app = create_app(settings)
    url = f"http://{settings.host}:{settings.port}"
    print(f"batchscope dashboard: {url}/", flush=True)
    print(f"control (opens once, sets a cookie): {url}/launch?token={settings.token}", flush=True)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        ws="websockets-sansio",
        # Compression would be per client (no encode-once) and costs more CPU than the
        # loopback/LAN bytes it saves.
        ws_per_message_deflate=False,
    )
    return 0


from app.cli.engine import cmd_engine  # noqa: E402
from app.cli.records import add_record_commands, cmd_export, cmd_import  # noqa: E402

COMMANDS = {
    "simulate": cmd_simulate,
    "serve": cmd_serve,
    "calibrate": cmd_calibrate,
    "db": cmd_db,
    "sessions": cmd_sessions,
    "engine": cmd_engine,
    "export": cmd_export,
    "import": cmd_import,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except CliError as exc:
        print(f"batchscope: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
