"""A small HTTP/1.1 server (asyncio + h11) that hands the TLS peer certificate to handlers.

Why not uvicorn: ASGI servers do not expose the client certificate of a TLS connection,
and request-header authentication (auth.py) must check it on every request. This server
listens with an `ssl.SSLContext` (TLS is done by asyncio's SSL protocol, so no byte the
client sends early is lost), parses requests with h11, and passes handlers a `Request`
carrying `peer_cert` (the dict of a verified client certificate, or None).
`set_ssl_context()` swaps the context for a rotated client CA without dropping a
connection: a second asyncio server starts on a duplicate of the same listening socket
before the old one closes, so the port never stops accepting; established connections
keep their session. No SO_REUSEPORT: a port another process holds fails `start()` with
`PortInUse` instead of silently sharing the traffic with it.

Limits: bodies over `max_body` bytes get 413 before they are read; a request whose body
would take the bytes held over all connections past `max_bodies` gets 429 with
`Retry-After` before it is read (each body is counted from its Content-Length, or as its
chunks arrive, until its answer is written: without it, clients that stop short of their
bodies make the server hold `max_body` each); headers over 64 KiB get 431; idle
keep-alive connections close after `idle_timeout` seconds. A handler that
raises gets a 500 (logged); handlers are expected to map their own errors.
Thread-safety: one event loop; handlers run on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import h11

__all__ = ["Request", "Response", "HttpServer", "Handler", "PortInUse"]

log = logging.getLogger("kvspread.adapter.http")

MAX_HEADER_BYTES = 64 * 1024


@dataclass
class Request:
    """One HTTP request: header names are lower-case and repeated headers kept in order."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes = b""
    peer_cert: dict[str, Any] | None = None
    client: tuple[str, int] | None = None
    path: str = ""
    query: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        parts = urlsplit(self.target)
        self.path = unquote(parts.path)
        self.query = parse_qs(parts.query, keep_blank_values=True)

    def header(self, name: str) -> str | None:
        n = name.lower()
        for k, v in self.headers:
            if k == n:
                return v
        return None

    def header_all(self, name: str) -> list[str]:
        n = name.lower()
        return [v for k, v in self.headers if k == n]


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[Request], Awaitable[Response]]


class PortInUse(OSError):
    """The listen address is taken, most likely by another adapter on this node."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(errno.EADDRINUSE, f"{host or '*'}:{port} is already in use")
        self.host = host
        self.port = port


@dataclass(eq=False)
class HttpServer:
    """Serve `handler` on host:port, TLS when `ssl_context` gives a context.

    Parameters:
        handler: async (Request) -> Response.
        ssl_context: TLS context (None: plain HTTP).
        max_body: largest accepted request body in bytes (413 above).
        max_bodies: request body bytes held over all connections at once (429 above;
            at least `max_body`, so that one largest body always fits an idle server).
        refusal: builds the answer to a request refused before it reaches `handler` (413,
            a malformed head) from (status, message, the request's content-type), so a
            protocol with its own error body (OTLP: a google.rpc.Status in the request's
            encoding) keeps it; None: `{"message": ...}` JSON.
    """

    handler: Handler
    host: str = "127.0.0.1"
    port: int = 0
    ssl_context: ssl.SSLContext | None = None
    max_body: int = 4 * 1024 * 1024
    max_bodies: int = 64 * 1024 * 1024
    idle_timeout: float = 90.0
    handshake_timeout: float = 10.0
    refusal: Callable[[int, str, str], Response] | None = None
    tls_failures: int = field(default=0, init=False)
    held: int = field(default=0, init=False)
    """Request body bytes counted against `max_bodies` now."""
    _servers: list[asyncio.Server] = field(default_factory=list, init=False, repr=False)
    _conns: set[asyncio.Task[None]] = field(default_factory=set, init=False, repr=False)

    async def _listen(self, sock: socket.socket | None = None) -> asyncio.Server:
        ctx = self.ssl_context
        return await asyncio.start_server(
            self._serve,
            None if sock else self.host,
            None if sock else self.port,
            sock=sock,
            limit=2**20,
            ssl=ctx,
            ssl_handshake_timeout=self.handshake_timeout if ctx else None,
        )

    async def start(self) -> None:
        """Listen; raises `PortInUse` when the address is taken (see the module docstring)."""
        try:
            server = await self._listen()
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(self.host, self.port) from None
            raise
        self._servers = [server]
        self.port = server.sockets[0].getsockname()[1]

    async def set_ssl_context(self, ctx: ssl.SSLContext) -> None:
        """Serve new connections with `ctx` (see the module docstring)."""
        self.ssl_context = ctx
        if not self._servers:
            return
        new = []
        for server in self._servers:
            for s in server.sockets:
                dup = socket.socket(s.family, s.type, s.proto, os.dup(s.fileno()))
                new.append(await self._listen(dup))
        old, self._servers = self._servers, new
        for server in old:
            server.close()

    async def stop(self) -> None:
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        for t in list(self._conns):
            t.cancel()
        for server in servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            await self._connection(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:  # noqa: BLE001 - one broken connection must not stop the server
            log.exception("connection failed")
        finally:
            self._conns.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer_cert: dict[str, Any] | None = None
        sslobj = writer.get_extra_info("ssl_object")
        if sslobj is not None:
            cert = sslobj.getpeercert()
            peer_cert = cert or None  # {} means "not verified": treat as none
        peer = writer.get_extra_info("peername")
        client = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        hold = [0]  # this connection's body bytes counted in `held`
        try:
            while True:
                req = await self._read_request(conn, reader, writer, peer_cert, client, hold)
                if req is None:
                    return
                try:
                    resp = await self.handler(req)
                except Exception:  # noqa: BLE001
                    log.exception("handler failed", extra={"kv": {"path": req.path}})
                    resp = Response(500, b'{"message":"internal error"}')
                keep = await self._write(conn, writer, resp, head=req.method == "HEAD")
                self._release(hold)
                if not keep or conn.our_state is h11.MUST_CLOSE:
                    return
                try:
                    conn.start_next_cycle()
                except h11.LocalProtocolError:
                    return
        finally:
            self._release(hold)

    @property
    def _bodies_limit(self) -> int:
        """`max_bodies`, but never under `max_body`: one largest body fits an idle server."""
        return max(self.max_bodies, self.max_body)

    def _take(self, hold: list[int], size: int) -> bool:
        """Count this request's body as `size` bytes in all; False when that does not fit."""
        more = size - hold[0]
        if more <= 0:
            return True
        if self.held + more > self._bodies_limit:
            return False
        self.held += more
        hold[0] = size
        return True

    def _release(self, hold: list[int]) -> None:
        self.held -= hold[0]
        hold[0] = 0

    async def _busy(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, head: h11.Request | None
    ) -> None:
        limit = self._bodies_limit
        await self._simple(
            conn,
            writer,
            429,
            f"request bodies in flight hold {self.held} of the {limit} bytes allowed over all "
            "connections (otlp_max_bodies_bytes on the OTLP port); retry later",
            head,
            [("retry-after", "1")],
        )

    async def _read_request(
        self,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer_cert: dict[str, Any] | None,
        client: tuple[str, int] | None,
        hold: list[int],
    ) -> Request | None:
        head: h11.Request | None = None
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                code = exc.error_status_hint
                await self._simple(conn, writer, code, f"bad request: {exc}", head)
                return None
            if event is h11.NEED_DATA:
                try:
                    data = await asyncio.wait_for(reader.read(65536), self.idle_timeout)
                except TimeoutError:
                    return None
                if not data and conn.their_state is h11.IDLE:
                    return None
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                head = event
                length = None
                for k, v in event.headers:
                    if k == b"content-length":
                        with contextlib.suppress(ValueError):
                            length = int(v)
                if length is not None and length > self.max_body:
                    await self._simple(
                        conn,
                        writer,
                        413,
                        f"request body of {length} bytes exceeds {self.max_body}",
                        head,
                    )
                    return None
                if length and not self._take(hold, length):
                    await self._busy(conn, writer, head)
                    return None
                continue
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > self.max_body:
                    await self._simple(
                        conn, writer, 413, f"request body exceeds {self.max_body} bytes", head
                    )
                    return None
                if not self._take(hold, size):  # a chunked body, counted as it arrives
                    await self._busy(conn, writer, head)
                    return None
                chunks.append(bytes(event.data))
                continue
            if isinstance(event, h11.EndOfMessage):
                assert head is not None
                return Request(
                    method=head.method.decode("latin-1"),
                    target=head.target.decode("latin-1"),
                    headers=[
                        (k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in head.headers
                    ],
                    body=b"".join(chunks),
                    peer_cert=peer_cert,
                    client=client,
                )
            if isinstance(event, h11.ConnectionClosed):
                return None

    async def _simple(
        self,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        code: int,
        msg: str,
        head: h11.Request | None,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        import json

        if self.refusal is not None:
            ctype = b""
            for k, v in head.headers if head is not None else ():
                if k == b"content-type":
                    ctype = v
            resp = self.refusal(code, msg, ctype.decode("latin-1"))
        else:
            resp = Response(code, json.dumps({"message": msg}).encode())
        resp.headers.extend(headers or ())
        with contextlib.suppress(h11.LocalProtocolError, ConnectionError):
            await self._write(conn, writer, resp, close=True)

    async def _write(
        self,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        resp: Response,
        close: bool = False,
        head: bool = False,
    ) -> bool:
        """Send `resp`; for a HEAD request (`head`) its headers only, Content-Length included,
        since HTTP allows no body there (h11 refuses one)."""
        headers = [
            ("content-type", resp.content_type),
            ("content-length", str(len(resp.body))),
            *resp.headers,
        ]
        if close:
            headers.append(("connection", "close"))
        try:
            data = conn.send(h11.Response(status_code=resp.status, headers=headers))
            data += conn.send(h11.Data(data=resp.body)) if resp.body and not head else b""
            data += conn.send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            return False
        writer.write(data)
        await writer.drain()
        return not close
