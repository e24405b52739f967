"""A `BaseHTTPRequestHandler` whose protocol errors are one-line JSON, like the routes' own.

The standard library answers a method without a `do_*` handler with an HTML 501 page and
a request line over 64 KiB with an HTML 414 page. The operator endpoints (collector and
router, through `kvspread.opsserver`) are read by scripts and people with curl: every
answer is JSON, a method other than `allowed_methods` is a 405 naming them in `Allow`.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

__all__ = ["JsonErrorHandler", "error_body", "shown", "SHOWN_CHARS"]

SHOWN_CHARS = 200
"""The most characters of a client's path (or id) an error answer echoes: a request line
may be 64 KiB, and an answer (and a log line) need not repeat it to say it is unknown."""


def shown(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text` as an error message quotes it: at most `limit` characters, and how long it
    was when cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def error_body(message: str) -> bytes:
    """The body of an error answer: `{"error": message}`, compact, one line ending in a
    newline (so that curl's output ends with it)."""
    return json.dumps({"error": message}, separators=(",", ":")).encode() + b"\n"


class JsonErrorHandler(BaseHTTPRequestHandler):
    """Subclass it with `do_GET` (and others listed in `allowed_methods`); any other
    method gets 405 with `Allow`, and every error the server itself raises (400, 414,
    431, 505) a JSON body. The access log is quiet: the parts log JSON lines of their own."""

    protocol_version = "HTTP/1.1"
    allowed_methods: tuple[str, ...] = ("GET", "HEAD")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's send_error with a JSON body instead of an HTML page; its
        501 for a method without a `do_*` handler becomes a 405 naming `allowed_methods`."""
        if code == 501 and self.command not in self.allowed_methods:
            allow = ", ".join(self.allowed_methods)
            path = shown(self.path.partition("?")[0])
            code, message = 405, f"method {self.command} not allowed on {path}; use {allow}"
        if message is None:
            if code == 414:
                message = "request line over 65536 bytes: shorten the URL"
            else:
                message = self.responses.get(code, ("error", ""))[0]
        self.log_error("code %d, message %s", code, message)
        self.send_response(code)
        self.send_header("Connection", "close")  # the request's body, if any, is unread
        if code == 405:
            self.send_header("Allow", ", ".join(self.allowed_methods))
        body = b""
        if code >= 200 and code not in (204, 205, 304):
            body = error_body(message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)
