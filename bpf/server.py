"""The collector's own HTTP endpoints: /metrics, /signals, /healthz, /readyz.

Routes only; the data comes from `CollectorState` and a Prometheus registry.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from bpf.state import CollectorState
from kvspread.signals import encode_signals

__all__ = ["CollectorServer", "readiness"]


def readiness(state: CollectorState, started: bool) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body) of /readyz: 503 until the first measurement cycle ran; then
    200, naming every missing source and why (the collector works with what it has)."""
    with state.lock:
        sources = dict(state.sources)
    body: dict[str, Any] = {
        "ready": started,
        "sources": {
            k: {"up": v.up, **({"reason": v.reason} if v.reason else {})}
            for k, v in sorted(sources.items())
        },
        "missing": sorted(k for k, v in sources.items() if not v.up),
    }
    return (200 if started else 503), body


class CollectorServer:
    def __init__(
        self,
        state: CollectorState,
        registry: CollectorRegistry,
        host: str,
        port: int,
        is_started: Any = lambda: True,
    ) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet: JSON logs elsewhere
                pass

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _json(self, code: int, doc: Any) -> None:
                self._send(
                    code, json.dumps(doc, separators=(",", ":")).encode(), "application/json"
                )

            def do_HEAD(self) -> None:
                self.do_GET()

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                try:
                    if path == "/metrics":
                        self._send(200, generate_latest(outer.registry), CONTENT_TYPE_LATEST)
                    elif path == "/signals":
                        sig = outer.state.signals
                        if sig is None:
                            self._json(503, {"error": "no signals measured yet"})
                        else:
                            self._send(200, encode_signals(sig).encode(), "application/json")
                    elif path == "/healthz":
                        self._send(200, b"ok\n", "text/plain")
                    elif path == "/readyz":
                        code, body = readiness(outer.state, bool(outer.is_started()))
                        self._json(code, body)
                    else:
                        self._json(
                            404,
                            {
                                "error": f"no such path {path}; try /metrics, /signals, "
                                "/healthz, /readyz"
                            },
                        )
                except Exception as exc:  # noqa: BLE001 - a scrape must never kill the server
                    self._json(500, {"error": f"{type(exc).__name__}: {exc}"})

        self.state = state
        self.registry = registry
        self.is_started = is_started
        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="collector-http", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
