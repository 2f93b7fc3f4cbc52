"""Allowed Host headers (DNS rebinding): a page on some other name that resolves to us must
not read recordings. Loopback names, IP literals (they cannot be rebound), the bind
address and what `--allowed-host` adds are served; any other name gets 400."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})


def host_name(header: str) -> str:
    """The name in a Host header, without port or IPv6 brackets, lowercased."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class AllowedHosts:
    def __init__(self, bind: str, extra: Iterable[str] = ()) -> None:
        names = {n.strip().lower().rstrip(".") for n in extra if n.strip()}
        self.any = "*" in names
        self.names = frozenset(names | LOOPBACK_NAMES | {host_name(bind)})

    def allows(self, header: str | None) -> bool:
        if self.any:
            return True
        if not header:
            return True  # not a browser (a browser always sends Host): no rebinding
        name = host_name(header).rstrip(".")
        return name in self.names or name.endswith(".localhost") or is_ip_literal(name)
