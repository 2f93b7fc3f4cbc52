"""`batchscope serve`: the dashboard (with the embedded engine unless --no-engine)."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.cli.common import (
    CliError,
    add_database_flag,
    add_loop_flags,
    check_trace_workload,
    loop_overrides,
)
from app.cli.help import from_env


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve", help="start the dashboard with the embedded engine")
    from_env(serve.add_argument("--host", help="bind address"), "host")
    from_env(serve.add_argument("--port", type=int, help="port"), "port")
    from_env(
        serve.add_argument("--runner", choices=("sim", "torch"), help="the engine's runner"),
        "runner",
    )
    from_env(
        serve.add_argument(
            "--model", metavar="DIR", help="local Llama-family checkpoint directory"
        ),
        "model",
        shown_default="built-in random weights",
    )
    from_env(
        serve.add_argument(
            "--device", choices=("auto", "cpu", "cuda"), help="where the torch runner runs"
        ),
        "device",
    )
    from_env(
        serve.add_argument(
            "--workload",
            metavar="demo|poisson|none|trace:FILE",
            help="the live engine's own arrivals (demo: a scripted wave on repeat that "
            "shows chunked prefill, waiting and preemption, docs/demo.md; trace:FILE: a "
            "Mooncake JSONL trace, played at its timestamps from each session's start)",
        ),
        "workload",
    )
    from_env(
        serve.add_argument(
            "--trace-block-tokens", type=int, metavar="N", help="trace:FILE: tokens per hash id"
        ),
        "trace_block_tokens",
    )
    add_loop_flags(serve)
    add_database_flag(serve)
    from_env(
        serve.add_argument(
            "--allowed-host",
            dest="allowed_hosts",
            action="append",
            metavar="NAME",
            help="a host name browsers may use to reach this server, besides loopback names "
            "and IP addresses (DNS-rebinding guard); repeatable",
        ),
        "allowed_hosts",
        shown_default="loopback names and IP addresses",
    )
    serve.add_argument(
        "--migrate",
        action="store_true",
        help="migrate a database at an older schema revision before serving (without it, "
        "serve refuses and names the command; a new SQLite file is always created)",
    )
    from_env(
        serve.add_argument("--token", help="control token"),
        "token",
        shown_default="generated at start",
    )
    from_env(
        serve.add_argument(
            "--no-engine",
            dest="engine",
            action="store_false",
            default=None,
            help="observe remote nodes only; no local engine",
        ),
        "engine",
        shown_default="engine on",
    )
    from_env(
        serve.add_argument(
            "--bus",
            metavar="NATS_URL",
            help="consume a fleet of nodes from NATS JetStream, e.g. nats://127.0.0.1:4222 "
            "(besides /ws/ingest)",
        ),
        "bus",
        shown_default="none: websocket ingest only",
    )
    serve.set_defaults(run=cmd_serve)


GRACEFUL_S = 10
"""Seconds open connections get at a stop before the ordered shutdown (app.main) begins."""

SETTINGS_FLAGS = (
    "host",
    "port",
    "runner",
    "model",
    "device",
    "workload",
    "trace_block_tokens",
    "database_url",
    "token",
    "engine",
    "allowed_hosts",
    "bus",
)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from app.cli.listen import bind_listener
    from app.db.migrate import NotMigrated, is_memory_url, prepare_for_serving
    from app.main import create_app
    from app.settings import Settings
    from engine.config import ConfigError

    overrides = {k: getattr(args, k) for k in SETTINGS_FLAGS if getattr(args, k) is not None}
    overrides.update(loop_overrides(args))
    try:
        settings = Settings(**overrides)
        settings.engine_config()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CliError(f"{where}: {first['msg']}") from None
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    check_trace_workload(settings)
    if settings.model and not Path(settings.model).is_dir():
        raise CliError(f"--model {settings.model}: no such directory")
    if settings.runner == "torch":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise CliError("the torch runner needs torch (pip install torch==2.13.0)") from None
    listener = bind_listener(settings.host, settings.port)
    if not is_memory_url(settings.database_url):
        try:
            done = prepare_for_serving(settings.database_url, migrate=args.migrate)
        except NotMigrated as exc:
            listener.close()
            raise CliError(str(exc)) from None
        if done:
            print(f"batchscope: {done}", flush=True)
    app = create_app(settings)
    url = f"http://{_url_host(settings.host)}:{settings.port}"
    print(f"batchscope dashboard: {url}/", flush=True)
    if not settings.is_loopback:
        print(
            f"note: listening on {settings.host}, not only loopback: others can reach this "
            "server. Viewing and control both need the token (the launch URL below sets it "
            "as a cookie; programs send Authorization: Bearer TOKEN). Browsers may reach it by "
            "IP address or a name given with --allowed-host.",
            flush=True,
        )
    print(f"control (opens once, sets a cookie): {url}/launch?token={settings.token}", flush=True)
    config = uvicorn.Config(
        app,
        log_level="warning",
        ws="websockets-sansio",
        # Compression would be per client (no encode-once) and costs more CPU than the
        # loopback/LAN bytes it saves.
        ws_per_message_deflate=False,
        ws_ping_interval=settings.ws_ping_interval_s,
        ws_ping_timeout=settings.ws_ping_interval_s,
        # At a stop, open connections (a viewer that no longer answers, a long download)
        # get this long to finish before the shutdown goes on: they never hold it up.
        timeout_graceful_shutdown=GRACEFUL_S,
    )
    uvicorn.Server(config).run(sockets=[listener])
    return 0


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
