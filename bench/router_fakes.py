"""Fake vLLM engines for bench/router_bench.py (no GPU here), lean so that they cost the
data-plane core little: one asyncio loop, a raw protocol per connection, no framework.

Each fake answers `GET /metrics` with an idle engine's vLLM metrics (the tests' text,
tests/router/fake_engine.py) and any other request, once its whole body is in
(`Content-Length`, or `Transfer-Encoding: chunked`, which Envoy uses when ext_proc streams the
body back in FULL_DUPLEX_STREAMED mode), with one small fixed chat-completion JSON naming the
fake. Keep-alive: one answer per request, so Envoy reuses its upstream connections.

    python bench/router_fakes.py 3 [asyncio|uvloop|auto]   # prints ip:port,ip:port,ip:port then serves
"""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar, cast

T = TypeVar("T")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.router.fake_engine import vllm_metrics  # noqa: E402

METRICS = vllm_metrics(0, 0, 0.1, 4096, 16).encode()


def reply(ctype: str, body: bytes) -> bytes:
    return (
        f"HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


METRICS_REPLY = reply("text/plain; version=0.0.4", METRICS)


def request_end(buf: bytes) -> tuple[int, bool] | None:
    """(end offset of the first complete request in buf, whether it is GET /metrics), or
    None while it is incomplete."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buf[:end].lower()
    start = end + 4
    metrics = head.startswith(b"get /metrics")
    i = head.find(b"content-length:")
    if i >= 0:
        n = int(head[i + 15 :].split(b"\r\n", 1)[0])
        return (start + n, metrics) if len(buf) >= start + n else None
    if b"transfer-encoding: chunked" not in head:
        return start, metrics
    pos = start
    while True:  # chunked: size line, data, CRLF ... then 0, (no trailers), CRLF
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(buf[pos:eol].split(b";", 1)[0], 16)
        if size == 0:
            fin = buf.find(b"\r\n\r\n", eol)
            return (fin + 4, metrics) if fin >= 0 else None
        pos = eol + 2 + size + 2
        if pos > len(buf):
            return None


class FakeEngine(asyncio.Protocol):
    def __init__(self, name: str) -> None:
        self.buf = b""
        self.answer = reply(
            "application/json",
            b'{"object":"chat.completion","served_by":"' + name.encode() + b'"}',
        )
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buf = self.buf + data if self.buf else data
        out = []
        while self.buf and (got := request_end(self.buf)) is not None:
            end, metrics = got
            self.buf = self.buf[end:]
            out.append(METRICS_REPLY if metrics else self.answer)
        if out and self.transport is not None:
            self.transport.write(b"".join(out))


async def serve(count: int) -> None:
    loop = asyncio.get_running_loop()
    servers = [
        await loop.create_server(
            lambda i=i: FakeEngine(f"fake-{i}"),  # type: ignore[misc]
            "127.0.0.1",
            0,
            backlog=1024,
        )
        for i in range(count)
    ]
    print(",".join(f"127.0.0.1:{s.sockets[0].getsockname()[1]}" for s in servers), flush=True)
    await asyncio.Event().wait()


def event_loop_runner(name: str) -> Callable[[Coroutine[Any, Any, T]], T]:
    """`asyncio.run` or `uvloop.run` for the bench's own processes ("auto": uvloop when it
    is installed; it is not a kvspread dependency, and the picker never uses it)."""
    if name in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if name == "uvloop":
                raise
        else:
            return uvloop.run
    return asyncio.run


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    event_loop_runner(sys.argv[2] if len(sys.argv) > 2 else "asyncio")(serve(count))
