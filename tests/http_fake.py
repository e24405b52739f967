"""The request handler the tests' fake servers build on (FakeKubeApi, the router's
FakeEngine): HTTP/1.1 keep-alive as the real servers speak it, and quiet."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import Any

__all__ = ["QuietHandler"]


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1, Nagle off (headers and body go out as separate writes: without it a
    keep-alive client waits for the delayed ACK), no access log on stderr."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return

    def send_body(self, code: int, content_type: str, body: bytes) -> None:
        """A whole response with its Content-Length."""
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
