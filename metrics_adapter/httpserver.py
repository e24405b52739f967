"""A small HTTP/1.1 server (asyncio + h11) that hands the TLS peer certificate to handlers.

Why not uvicorn: ASGI servers do not expose the client certificate of a TLS connection,
and request-header authentication (auth.py) must check it on every request. With an
`ssl.SSLContext` this server accepts TCP, pauses reading and hands the socket to asyncio's
SSL protocol (`loop.start_tls`; no byte the client sent early is lost), at most
`MAX_HANDSHAKES` at once, parses requests with h11, and passes handlers a `Request`
carrying `peer_cert` (the dict of a verified client certificate, or None).
`set_ssl_context()` swaps the context for a rotated client CA without dropping a
connection: a second asyncio server starts on a duplicate of the same listening socket
before the old one closes, so the port never stops accepting; established connections
keep their session. No SO_REUSEPORT: a port another process holds fails `start()` with
`PortInUse` instead of silently sharing the traffic with it.

Limits (each measured against the real adapter; docs/adapter.md, "Connections and slow
clients"):

- Bodies over `max_body` bytes get 413 (before they are read when Content-Length says so);
  heads over 64 KiB get 431.
- A request whose bytes take those held over all connections past `max_bodies` gets 429
  with `Retry-After`. Head and body bytes are counted as they arrive, until the answer is
  written: uncounted, 4,096 unfinished 60 KB heads took RSS from 71 to 575 MiB; counted from
  a declared Content-Length, 16 clients that declared 4 MiB and sent a byte now and then
  held the whole budget.
- A request must arrive whole within `request_timeout` seconds of its first byte (of the
  connection's opening for the first one), else 408; between requests a keep-alive
  connection may wait `idle_timeout`; an answer must be written within `request_timeout`.
- At most `max_connections` connections are served. At the limit a new one takes the place
  of the one idle longest (no request begun; closed, as nginx reuses keep-alive
  connections). With none idle, its head is read (`REFUSE_READ_S` at most) and answered 503
  with `Retry-After: 1`; past `REFUSING_MAX` such refusals a connection is closed unanswered.
  Bodiless GET/HEAD of the `exempt` paths (probes, /metrics) are answered over the limit.
- Refusals close lingering: the answer, then the client's bytes read and dropped for up to
  `LINGER_S`, so a client still sending reads the answer instead of a reset.
- At most `MAX_HANDSHAKES` TLS handshakes go on at once, each within `handshake_timeout`; a
  new connection past them takes the place of the oldest (counted as an eviction).

A handler that raises gets a 500 (logged); handlers are expected to map their own errors.
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
REFUSE_READ_S = 5.0
"""How long a connection over `max_connections` may take to send its request head."""
REFUSING_MAX = 256
"""Connections being refused at once (over `max_connections`); more are closed unanswered."""
LINGER_S = 2.0
"""After a refusal, how long the client's remaining bytes are read and dropped."""
MAX_HANDSHAKES = 128
"""TLS handshakes going on at once. Each holds asyncio's 256 KiB SSL buffer: uncounted, 2,000
TCP connections that sent nothing took the adapter from 71 to 470 MiB for the 10 s each
waited; at the limit a new connection takes the place of the oldest handshake."""
STREAM_LIMIT = 2**16
"""The reader buffers up to twice this before it pauses the socket."""


class _Accepted(asyncio.Protocol):
    """A connection to the TLS port before its handshake: reading paused at once, so the
    client's ClientHello stays in the socket for asyncio's SSL protocol."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()
        self.server._accepted(transport)


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
        max_bodies: request bytes (heads and bodies) held over all connections at once
            (429 above; at least `max_body`, so that one largest body always fits an idle
            server).
        max_connections: connections served at once (503 above).
        request_timeout: seconds a request has to arrive whole, and its answer to be
            written (408 when the request is late).
        idle_timeout: seconds a keep-alive connection may wait for its next request.
        exempt: paths (no trailing slash) whose bodiless GET and HEAD requests are answered
            even over `max_connections` (see `_exempt`).
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
    max_connections: int = 1024
    request_timeout: float = 60.0
    idle_timeout: float = 90.0
    handshake_timeout: float = 10.0
    refusal: Callable[[int, str, str], Response] | None = None
    exempt: frozenset[str] = frozenset()
    tls_failures: int = field(default=0, init=False)
    held: int = field(default=0, init=False)
    """Request bytes (heads and bodies) counted against `max_bodies` now."""
    refused_connections: int = field(default=0, init=False)
    """Connections refused (503 or closed) since the start for `max_connections`."""
    evicted_connections: int = field(default=0, init=False)
    """Idle connections closed since the start to admit a new one at `max_connections`."""
    _refusing: int = field(default=0, init=False, repr=False)
    _idle: dict[asyncio.Task[None], None] = field(default_factory=dict, init=False, repr=False)
    """Connections waiting for a request's first byte, oldest first."""
    _servers: list[asyncio.Server] = field(default_factory=list, init=False, repr=False)
    _conns: set[asyncio.Task[None]] = field(default_factory=set, init=False, repr=False)
    _handshakes: dict[asyncio.Future[None], asyncio.Transport] = field(
        default_factory=dict, init=False, repr=False
    )
    """TLS handshakes going on now, oldest first (at most MAX_HANDSHAKES)."""

    async def _listen(self, sock: socket.socket | None = None) -> asyncio.Server:
        if self.ssl_context is None:
            return await asyncio.start_server(
                self._serve,
                None if sock else self.host,
                None if sock else self.port,
                sock=sock,
                limit=STREAM_LIMIT,
            )
        loop = asyncio.get_running_loop()
        if sock is not None:
            return await loop.create_server(lambda: _Accepted(self), sock=sock)
        return await loop.create_server(lambda: _Accepted(self), self.host, self.port)

    def _accepted(self, transport: asyncio.Transport) -> None:
        """A TCP connection to the TLS port, its reading paused: admit it to the handshake,
        closing the oldest handshake still going when `MAX_HANDSHAKES` are (a stalled
        client's; a real one finishes in milliseconds)."""
        if len(self._handshakes) >= MAX_HANDSHAKES:
            oldest = next(iter(self._handshakes))
            oldest_transport = self._handshakes.pop(oldest)
            oldest.cancel()
            oldest_transport.abort()  # also when its task never started
            self.evicted_connections += 1
        task = asyncio.ensure_future(self._handshake(transport))
        self._handshakes[task] = transport

    async def _handshake(self, transport: asyncio.Transport) -> None:
        """TLS on an accepted connection (asyncio's SSL protocol, so no byte the client sent
        is lost: reading stayed paused until the handshake took the socket), then `_serve`."""
        task = asyncio.current_task()
        ctx = self.ssl_context
        assert ctx is not None and task is not None
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=STREAM_LIMIT, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        try:
            tls = await loop.start_tls(
                transport, protocol, ctx, server_side=True,
                ssl_handshake_timeout=self.handshake_timeout,
            )  # fmt: skip
        except (Exception, asyncio.CancelledError):  # noqa: BLE001 - a failed handshake is the client's
            self.tls_failures += 1
            transport.abort()
            return
        finally:
            self._handshakes.pop(task, None)
        if tls is None:  # the client closed during the handshake
            transport.abort()
            return
        protocol.connection_made(tls)
        writer = asyncio.StreamWriter(tls, protocol, reader, loop)
        await self._serve(reader, writer)

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
        for t in [*self._conns, *self._handshakes]:
            t.cancel()
        for transport in self._handshakes.values():
            transport.abort()
        for server in servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)

    @property
    def connections(self) -> int:
        """Connections being served now (refusals not counted)."""
        return len(self._conns)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        over = len(self._conns) >= self.max_connections
        if over and self._idle:
            oldest = next(iter(self._idle))  # nothing started there: close it for this one
            del self._idle[oldest]
            oldest.cancel()
            self.evicted_connections += 1
            over = False
        if over and self._refusing >= REFUSING_MAX:
            self.refused_connections += 1
            writer.transport.abort()
            return
        if over:
            self._refusing += 1
        else:
            self._conns.add(task)
        try:
            await (self._over_limit(reader, writer) if over else self._connection(reader, writer))
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:  # noqa: BLE001 - one broken connection must not stop the server
            log.exception("connection failed")
        finally:
            if over:
                self._refusing -= 1
            else:
                self._conns.discard(task)
                self._idle.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)

    async def _over_limit(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """503 to a connection over `max_connections`, after its request head (a client that
        has not sent its request yet could take an early answer for a stray one). `_serve`
        counts it in `_refusing` (at most REFUSING_MAX) and closes it."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        head: h11.Request | None = None
        with contextlib.suppress(TimeoutError, h11.RemoteProtocolError):
            async with asyncio.timeout(REFUSE_READ_S):
                while head is None:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        data = await reader.read(65536)
                        conn.receive_data(data)
                        if not data:
                            return
                    elif isinstance(event, h11.Request):
                        head = event
                    else:
                        return
        if head is not None:
            req = self._request(head, b"", writer)
            if self._exempt(req):
                await self._write(conn, writer, await self.handler(req), True, req.method == "HEAD")
                await self._linger(reader, writer)
                return
        self.refused_connections += 1
        msg = (
            f"the server holds {self.max_connections} connections, its limit "
            "(max_connections; otlp_max_connections on the OTLP port); retry later"
        )
        await self._refuse(conn, reader, writer, 503, msg, head, [("retry-after", "1")])

    def _exempt(self, req: Request) -> bool:
        """A bodiless GET or HEAD of an `exempt` path (probes, /metrics): answered even over
        `max_connections`, as the API server's priority and fairness exempts its probes,
        so that a flood shows in the metrics and does not make the kubelet restart us."""
        if req.method not in ("GET", "HEAD"):
            return False
        if any(req.header(h) is not None for h in ("content-length", "transfer-encoding")):
            return False
        return req.path.rstrip("/") in self.exempt

    def _request(self, head: h11.Request, body: bytes, writer: asyncio.StreamWriter) -> Request:
        """The handler's view of a request: decoded head, body, TLS peer certificate."""
        peer_cert: dict[str, Any] | None = None
        sslobj = writer.get_extra_info("ssl_object")
        if sslobj is not None:
            peer_cert = sslobj.getpeercert() or None  # {} means "not verified": treat as none
        peer = writer.get_extra_info("peername")
        return Request(
            method=head.method.decode("latin-1"),
            target=head.target.decode("latin-1"),
            headers=[(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in head.headers],
            body=body,
            peer_cert=peer_cert,
            client=(str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None,
        )

    async def _linger(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """After an answer that closes: end our side, then read and drop what the client
        still sends for up to `LINGER_S` (a close with its bytes unread would make the kernel
        reset the connection, and the client could lose the answer)."""
        with contextlib.suppress(Exception):
            if writer.can_write_eof():
                writer.write_eof()
            async with asyncio.timeout(LINGER_S):
                while await reader.read(65536):
                    pass

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        hold = [0]  # this connection's body bytes counted in `held`
        first = True
        try:
            while True:
                req = await self._read_request(conn, reader, writer, hold, first)
                first = False
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
        """`max_bodies`, but never under `max_body`."""
        return max(self.max_bodies, self.max_body)

    def _take(self, hold: list[int], size: int) -> bool:
        """Count this request as `size` bytes in all; False when that does not fit beside
        the others (a request alone always fits: it is bounded by `max_body` and the head
        limit already)."""
        more = size - hold[0]
        if more <= 0:
            return True
        if self.held + more > self._bodies_limit and self.held > hold[0]:
            return False
        self.held += more
        hold[0] = size
        return True

    def _release(self, hold: list[int]) -> None:
        self.held -= hold[0]
        hold[0] = 0

    async def _busy(
        self,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        head: h11.Request | None,
    ) -> None:
        limit = self._bodies_limit
        await self._refuse(
            conn,
            reader,
            writer,
            429,
            f"requests in flight hold {self.held} of the {limit} bytes allowed over all "
            "connections (otlp_max_bodies_bytes on the OTLP port); retry later",
            head,
            [("retry-after", "1")],
        )

    async def _read_request(
        self,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        hold: list[int],
        first: bool,
    ) -> Request | None:
        """The next request, or None when the connection is to close (idle, closed by the
        client, or refused here). The request's deadline starts at its first byte (at the
        connection's opening for the first request)."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        started = bool(conn.trailing_data[0])  # a pipelined request's bytes are here already
        deadline: float | None = None
        if first or started:
            deadline = loop.time() + self.request_timeout
        head: h11.Request | None = None
        chunks: list[bytes] = []
        size = 0
        received = 0  # this request's bytes read off the socket, head and body
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                code = exc.error_status_hint
                await self._refuse(conn, reader, writer, code, f"bad request: {exc}", head)
                return None
            if event is h11.NEED_DATA:
                wait = self.idle_timeout if deadline is None else deadline - loop.time()
                if not started:
                    self._idle[task] = None
                try:
                    data = await asyncio.wait_for(reader.read(65536), max(wait, 0.0))
                except TimeoutError:
                    if not started:
                        return None  # idle: nothing of a request came
                    msg = f"the request did not arrive whole within {self.request_timeout:g} s"
                    await self._refuse(conn, reader, writer, 408, msg, head)
                    return None
                finally:
                    self._idle.pop(task, None)
                if not data and conn.their_state is h11.IDLE:
                    return None
                if not started:
                    started = True
                    if deadline is None:
                        deadline = loop.time() + self.request_timeout
                received += len(data)
                if not self._take(hold, received):  # counted as they arrive
                    await self._busy(conn, reader, writer, head)
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
                    await self._refuse(
                        conn,
                        reader,
                        writer,
                        413,
                        f"request body of {length} bytes exceeds {self.max_body}",
                        head,
                    )
                    return None
                if conn.they_are_waiting_for_100_continue:  # curl's Expect on bodies over 1 MB
                    writer.write(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
                continue
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > self.max_body:
                    msg = f"request body exceeds {self.max_body} bytes"
                    await self._refuse(conn, reader, writer, 413, msg, head)
                    return None
                chunks.append(bytes(event.data))
                continue
            if isinstance(event, h11.EndOfMessage):
                assert head is not None
                return self._request(head, b"".join(chunks), writer)
            if isinstance(event, h11.ConnectionClosed):
                return None

    async def _refuse(
        self,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        code: int,
        msg: str,
        head: h11.Request | None,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        """Answer `code` with `msg` (in the protocol's error body, see `refusal`) and close,
        lingering."""
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
        await self._linger(reader, writer)

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
        await asyncio.wait_for(writer.drain(), self.request_timeout)
        return not close
