"""The listening socket `serve` binds before it prints anything, so a port already in use
is reported as the error it is instead of after a launch URL that leads nowhere."""

from __future__ import annotations

import errno
import socket

from app.cli.common import CliError


def bind_listener(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port), for uvicorn to serve on; CliError when taken."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise CliError(f"--host {host}: cannot resolve it ({exc.strerror})") from None
    sock = socket.socket(family, kind, proto)
    # As uvicorn does: a port left in TIME_WAIT by a previous run is free to take.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise CliError(
                f"port {port} on {host} is already in use (another batchscope serve?): "
                "stop it, or pick another port with --port / BATCHSCOPE_PORT"
            ) from None
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock
