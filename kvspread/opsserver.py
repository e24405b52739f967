"""A small HTTP server in a thread for operator endpoints (/metrics, /healthz, /readyz, debug
JSON), shared by the collector (bpf/server.py) and the router (router/debug.py).

These endpoints serve scrapes and people, not traffic, so the standard library's threading
server is enough. A part gives one `route(path, query) -> Reply` function; this module owns
the HTTP side: status line, Content-Type and Content-Length, HEAD without a body, quiet access
log, a 500 with a JSON message (never a traceback) when the route raises, and (from
`kvspread.httpbase`) a JSON 405 for other methods and JSON protocol errors such as 414.
A client that resets or drops its connection (a probe or scrape that timed out) is no
error of the server: it is logged at debug, never as the standard library's multi-line
traceback on stderr, which would break a JSON log's parsing.

Bounded: the standard library's server starts a thread per connection and waits on a
client for ever, so 10,000 idle connections would be 10,000 threads. Here at most
`MAX_CONNECTIONS` connections are served at once (one more is answered 503 with
`Retry-After` and closed, from the accepting thread), a connection that sends nothing
for `READ_TIMEOUT_S` is closed, and so is one whose request head (request line and
headers) is not whole `HEAD_TIMEOUT_S` after its first byte: a client sending a header
byte every 5 s never idles 30 s, and 64 of them took every slot (found black-box: /healthz
answered 503 for as long as they ran).
"""

from __future__ import annotations

import io
import json
import logging
import math
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import Any, NamedTuple

from kvspread.httpbase import JsonErrorHandler, error_body

__all__ = [
    "MAX_CONNECTIONS",
    "READ_TIMEOUT_S",
    "HEAD_TIMEOUT_S",
    "Reply",
    "Route",
    "OpsServer",
    "json_reply",
    "strict",
    "text_reply",
]

MAX_CONNECTIONS = 64
"""Connections served at once (a thread each): scrapers, probes and people need a few; the
bound keeps a flood of idle connections from taking a thread (and its stack) each."""
READ_TIMEOUT_S = 30.0
"""A connection that sends nothing for this long is closed (longer than any scrape or
keep-alive gap a Prometheus or a kubelet probe leaves)."""
HEAD_TIMEOUT_S = 10.0
"""A request head must be whole this long after its first byte (curl, Prometheus and the
kubelet send it in one write)."""


class _HeadDeadline(io.RawIOBase):
    """The connection's reads: each waits at most the idle timeout, and once a request's
    first byte has come, no later than its head's deadline (`TimeoutError` past it, which
    the standard library's handler answers by closing the connection)."""

    def __init__(self, sock: socket.socket, idle_s: float, head_s: float) -> None:
        super().__init__()
        self.sock, self.idle_s, self.head_s = sock, idle_s, head_s
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        timeout = self.idle_s
        if self.deadline is not None:
            timeout = min(timeout, self.deadline - time.monotonic())
            if timeout <= 0:
                raise TimeoutError("request head not whole in time")
        self.sock.settimeout(timeout)
        n = self.sock.recv_into(buffer)
        if n and self.deadline is None:
            self.deadline = time.monotonic() + self.head_s
        return n


class Reply(NamedTuple):
    """One HTTP answer."""

    status: int
    body: bytes
    content_type: str


Route = Callable[[str, dict[str, str]], Reply]
"""(path without the query, query parameters) -> the answer."""


def strict(doc: Any) -> Any:
    """`doc` with every NaN or infinite float replaced by None (JSON null)."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {k: strict(v) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [strict(v) for v in doc]
    return doc


def json_reply(status: int, doc: Any, indent: int | None = None) -> Reply:
    """`doc` as strict JSON (NaN and infinities as null, so jq and JSON.parse read it):
    compact by default, `indent` for documents people read."""
    doc = strict(doc)
    if indent is None:
        text = json.dumps(doc, separators=(",", ":"), allow_nan=False)
    else:
        text = json.dumps(doc, indent=indent, allow_nan=False)
    return Reply(status, text.encode(), "application/json")


def text_reply(status: int, text: str) -> Reply:
    return Reply(status, text.encode(), "text/plain")


log = logging.getLogger("kvspread.opsserver")


def _busy_answer(limit: int) -> bytes:
    body = error_body(f"the operator endpoint serves {limit} connections at once; retry")
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class _QuietServer(ThreadingHTTPServer):
    """The standard library's threading server, whose `handle_error` prints a traceback
    to stderr for anything a handler raises: here a client gone away is a debug line, any
    other failure one JSON error line naming it. It serves at most `max_connections`
    connections at once (module docstring)."""

    max_connections = MAX_CONNECTIONS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self.active = 0
        """Connections being served now (a handler thread each)."""

    def _take(self) -> bool:
        with self._lock:
            if self.active >= self.max_connections:
                return False
            self.active += 1
            return True

    def _give(self) -> None:
        with self._lock:
            self.active -= 1

    def process_request(self, request: Any, client_address: Any) -> None:
        if self._take():
            try:
                super().process_request(request, client_address)
            except BaseException:  # no thread started: the slot is not taken
                self._give()
                raise
            return
        log.warning(
            "operator endpoint busy: connection refused",
            extra={"kv": {"limit": self.max_connections}},
        )
        try:  # the accepting thread must not wait on this client
            request.settimeout(1.0)
            request.sendall(_busy_answer(self.max_connections))
        except OSError:
            pass
        self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._give()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        kv = {"client": str(client_address[0]) if client_address else "", "error": repr(exc)}
        if isinstance(exc, ConnectionError | TimeoutError):  # reset, broken pipe, aborted
            log.debug("client closed the connection", extra={"kv": kv})
        else:
            kv["error"] = kv["error"][:300]
            log.error("operator endpoint request failed", extra={"kv": kv})


class _Ipv6Server(_QuietServer):
    """The same server on an IPv6 address (`--host ::1`, `--listen ::`): the standard
    library's server is IPv4 only unless its class says otherwise."""

    address_family = socket.AF_INET6


class OpsServer:
    """Serve `route` on host:port (port 0: any free port, see `port`) from a daemon thread,
    at most `max_connections` connections at once, each closed after `read_timeout_s`
    without a byte from its client."""

    def __init__(
        self,
        host: str,
        port: int,
        route: Route,
        thread_name: str,
        max_connections: int = MAX_CONNECTIONS,
        read_timeout_s: float = READ_TIMEOUT_S,
        head_timeout_s: float = HEAD_TIMEOUT_S,
    ) -> None:
        class Handler(JsonErrorHandler):  # GET and HEAD; other methods 405, errors JSON
            timeout = read_timeout_s  # StreamRequestHandler: the socket's timeout

            def setup(self) -> None:
                super().setup()
                self.rfile.close()
                self._reads = _HeadDeadline(self.connection, read_timeout_s, head_timeout_s)
                self.rfile = io.BufferedReader(self._reads)

            def handle_one_request(self) -> None:
                self._reads.deadline = None  # a new request: its clock starts at its first read
                super().handle_one_request()

            def parse_request(self) -> bool:
                ok = super().parse_request()
                self._reads.deadline = None  # the head is whole (these routes read no body)
                return ok

            def do_HEAD(self) -> None:  # noqa: N802
                self.do_GET()

            def do_GET(self) -> None:  # noqa: N802
                path, _, query = self.path.partition("?")
                try:
                    reply = route(path, dict(urllib.parse.parse_qsl(query)))
                except Exception as exc:  # noqa: BLE001 - a scrape must never kill the server
                    reply = json_reply(500, {"error": f"{type(exc).__name__}: {exc}"})
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(reply.body)

        base = _Ipv6Server if ":" in host else _QuietServer
        server_class = type(base.__name__, (base,), {"max_connections": max_connections})
        self.httpd = server_class((host, port), Handler)
        self.httpd.daemon_threads = True
        self.port: int = self.httpd.server_address[1]
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name=thread_name, daemon=True
        )

    @property
    def connections(self) -> int:
        """Connections being served now (at most `max_connections`)."""
        return int(self.httpd.active)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for serve_forever, so only if it runs
            self.httpd.shutdown()
        self.httpd.server_close()
