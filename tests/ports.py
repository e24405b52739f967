"""Ports for the tests' and benchmarks' servers: free ones, and waiting until a server
started on one answers (shared by every test folder and bench/)."""

from __future__ import annotations

import socket
import subprocess
import time
from typing import Any

import httpx

__all__ = ["free_port", "port_free_on", "wait_http_ok"]


def free_port() -> int:
    """A port free on 127.0.0.1 now (the kernel's pick; a server binds it right after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """`n` distinct ports free on 127.0.0.1 now: all bound at once while they are picked, so
    the kernel cannot hand the same one out twice (`free_port` called n times can)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


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


def wait_http_ok(
    url: str, timeout: float = 30.0, proc: subprocess.Popen[Any] | None = None
) -> None:
    """Poll GET `url` until it answers 200. Fails (RuntimeError) after `timeout` seconds, or
    as soon as `proc`, the server's process, has exited, with what it wrote to a piped
    stderr, so a server that cannot start says why instead of timing out."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc is not None and proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            text = err.decode(errors="replace") if isinstance(err, bytes) else err
            raise RuntimeError(f"{url}: the server exited ({proc.returncode}): {text[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer 200 within {timeout:g} s")
        time.sleep(0.1)
