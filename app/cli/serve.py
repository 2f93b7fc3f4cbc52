"""`batchscope serve`: the dashboard (with the embedded engine unless --no-engine)."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

from app.cli.common import CliError, add_database_flag


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve", help="start the dashboard with the embedded engine")
    serve.add_argument("--host", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    serve.add_argument("--runner", choices=("sim", "torch"))
    serve.add_argument("--model", metavar="DIR", help="local Llama-family checkpoint directory")
    serve.add_argument("--device", choices=("auto", "cpu", "cuda"))
    serve.add_argument("--workload", choices=("poisson", "none"))
    add_database_flag(serve)
    serve.add_argument("--token", help="control token (default: generated at start)")
    serve.add_argument(
        "--allowed-host",
        dest="allowed_hosts",
        action="append",
        metavar="NAME",
        help="a host name browsers may use to reach this server, besides loopback names and "
        "IP addresses (DNS-rebinding guard); repeatable",
    )
    serve.add_argument(
        "--no-engine",
        dest="engine",
        action="store_false",
        default=None,
        help="observe remote nodes only; no local engine",
    )
    serve.set_defaults(run=cmd_serve)


SETTINGS_FLAGS = (
    "host",
    "port",
    "runner",
    "model",
    "device",
    "workload",
    "database_url",
    "token",
    "engine",
    "allowed_hosts",
)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from app.db.migrate import NotMigrated, is_memory_url, require_migrated
    from app.main import create_app
    from app.settings import Settings
    from engine.config import ConfigError

    overrides = {k: getattr(args, k) for k in SETTINGS_FLAGS if getattr(args, k) is not None}
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
    if not is_memory_url(settings.database_url):
        try:
            require_migrated(settings.database_url)
        except NotMigrated as exc:
            raise CliError(str(exc)) from None
    # Listen before anything starts: a busy port or a bad host is one message, exit 2,
    # and nothing written.
    sock = listen(settings.host, settings.port)
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
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port; CliError (exit 2) when that cannot be."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise CliError(f"--host {host}: not an address this machine has ({exc.strerror})") from None
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock
