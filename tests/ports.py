"""Free TCP ports for the tests' servers (shared by every test folder)."""

from __future__ import annotations

import socket

__all__ = ["free_port", "port_free_on"]


def free_port() -> int:
    """A port free on 127.0.0.1 now (the kernel's pick; a server binds it right after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free_on(hosts: list[str]) -> int:
    """One port free on every address in `hosts` (loopback aliases like 127.0.0.2), for
    servers that must share a port number across addresses."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind((hosts[0], 0))
            port = int(s.getsockname()[1])
        try:
            for h in hosts[1:]:
                with socket.socket() as t:
                    t.bind((h, port))
            return port
        except OSError:
            continue
    raise RuntimeError(f"no port free on every address of {hosts}")
