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
"""

from __future__ import annotations

import json
import logging
import math
import socket
import sys
import threading
import urllib.parse
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import Any, NamedTuple

from kvspread.httpbase import JsonErrorHandler

__all__ = ["Reply", "Route", "OpsServer", "json_reply", "strict", "text_reply"]


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


class _QuietServer(ThreadingHTTPServer):
    """The standard library's threading server, whose `handle_error` prints a traceback
    to stderr for anything a handler raises: here a client gone away is a debug line, any
    other failure one JSON error line naming it."""

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
    """Serve `route` on host:port (port 0: any free port, see `port`) from a daemon thread."""

    def __init__(self, host: str, port: int, route: Route, thread_name: str) -> None:
        class Handler(JsonErrorHandler):  # GET and HEAD; other methods 405, errors JSON
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

        server_class = _Ipv6Server if ":" in host else _QuietServer
        self.httpd = server_class((host, port), Handler)
        self.httpd.daemon_threads = True
        self.port: int = self.httpd.server_address[1]
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name=thread_name, daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for serve_forever, so only if it runs
            self.httpd.shutdown()
        self.httpd.server_close()
