"""The picker's HTTP side: /metrics (Prometheus), /debug/explain, /debug/endpoints,
/healthz, /readyz. Small stdlib server in a thread: it serves operators, not traffic.

GET /debug/explain?request_id=ID (or /debug/explain/ID): the decision for that request
(`x-request-id`, which Envoy sets): the request's modality and token estimates, every
candidate's tier, score and terms, what was excluded and why. Without an id: 400 naming
the recent ids. Unknown id: 404.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from router.endpoints import EndpointSet
from router.metrics import RouterMetrics
from router.picker import Picker

__all__ = ["DebugServer"]


class DebugServer:
    def __init__(
        self,
        host: str,
        port: int,
        picker: Picker,
        endpoints: EndpointSet,
        metrics: RouterMetrics,
        ready: Callable[[], bool],
    ) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _json(self, code: int, doc: Any) -> None:
                self._send(code, json.dumps(doc, indent=1).encode(), "application/json")

            def do_GET(self) -> None:  # noqa: N802
                url = urllib.parse.urlsplit(self.path)
                q = dict(urllib.parse.parse_qsl(url.query))
                path = url.path.rstrip("/") or "/"
                if path == "/metrics":
                    views = outer.endpoints.views()
                    outer.metrics.stale.set(sum(1 for v in views if not v.fresh))
                    outer.metrics.endpoints.set(len(views))
                    self._send(200, generate_latest(outer.metrics.registry), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    self._send(200, b"ok\n", "text/plain")
                elif path == "/readyz":
                    ok = outer.ready()
                    self._send(200 if ok else 503, b"ok\n" if ok else b"not ready\n", "text/plain")
                elif path == "/debug/endpoints":
                    self._json(200, [v.__dict__ for v in outer.endpoints.views()])
                elif path.startswith("/debug/explain"):
                    rid = q.get("request_id") or path.removeprefix("/debug/explain").strip("/")
                    if not rid:
                        self._json(
                            400,
                            {
                                "error": "give ?request_id=ID (the request's x-request-id)",
                                "recent": outer.picker.recent_ids(),
                            },
                        )
                        return
                    doc = outer.picker.explain(rid)
                    if doc is None:
                        self._json(404, {"error": f"no decision kept for request id {rid!r}"})
                    else:
                        self._json(200, doc)
                else:
                    self._json(404, {"error": f"no such path {url.path!r}"})

        self.picker = picker
        self.endpoints = endpoints
        self.metrics = metrics
        self.ready = ready
        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for serve_forever, so only if it runs
            self._server.shutdown()
        self._server.server_close()
