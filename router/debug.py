"""The picker's HTTP side: /metrics (Prometheus), /debug/explain, /debug/endpoints,
/healthz, /readyz. Small stdlib server in a thread: it serves operators, not traffic.

GET /debug/explain?request_id=ID (or /debug/explain/ID): the decision for that request
(`x-request-id`, which Envoy sets): the request's modality and token estimates, every
candidate's tier, score and terms, what was excluded and why. Without an id: 400 naming
the recent ids. Unknown id: 404.

Every JSON answer is strict JSON (`kvspread.opsserver.json_reply`: a NaN or an infinity is
written as null), so jq and JSON.parse read it. Anything but GET/HEAD answers 405 with
`Allow: GET, HEAD`, and a request line over 64 KiB 414, each as one line of JSON
(`kvspread.httpbase.JsonErrorHandler`, as the collector's endpoints).
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from kvspread.httpbase import shown
from kvspread.opsserver import OpsServer, Reply, json_reply, text_reply
from router.bodybudget import BodyBudget
from router.endpoints import EndpointSet
from router.h2grpc import H2GrpcServer
from router.metrics import RouterMetrics
from router.picker import Picker

__all__ = ["DebugServer"]


class DebugServer(OpsServer):
    """The picker's operator endpoints on host:port (`kvspread.opsserver` serves them)."""

    def __init__(
        self,
        host: str,
        port: int,
        picker: Picker,
        endpoints: EndpointSet,
        metrics: RouterMetrics,
        ready: Callable[[], bool],
        bodies: BodyBudget | None = None,
        grpc_server: Callable[[], H2GrpcServer | None] = lambda: None,
    ) -> None:
        self.picker = picker
        self.bodies = bodies
        self.grpc_server = grpc_server  # the h2 server once it runs (None with grpcio)
        self.endpoints = endpoints
        self.metrics = metrics
        self.ready = ready
        super().__init__(host, port, self.route, "router-debug-http")

    def _cache_metrics(self) -> None:
        m, c = self.metrics, self.picker.cache
        m.prefix_entries.set(c.prefix.entries)
        m.prefix_bytes.set(c.prefix.memory_bytes())
        m.catch_up(m.evictions, "prefix", c.prefix.evictions)
        m.catch_up(m.evictions, "image", c.images.evictions)
        ev = c.kv_events
        if ev is not None:
            m.catch_up(m.kv_events, "applied", ev.messages)
            m.catch_up(m.kv_events, "bad", ev.bad)
            m.catch_up(m.kv_events, "gap", ev.gaps)

    def _body_metrics(self) -> None:
        """The body budget's counts, kept by the gRPC server's loop, read here (ints: a
        read from this thread sees one value or the next, never a torn one)."""
        b = self.bodies
        if b is None:
            return
        m = self.metrics
        m.body_held.set(b.held)
        m.catch_up(m.body_refusals, "413", b.refused_too_large)
        m.catch_up(m.body_refusals, "429", b.refused_busy)

    def _grpc_metrics(self) -> None:
        """The h2 server's counts (kept on its loop; int reads, as `_body_metrics`)."""
        srv = self.grpc_server()
        if srv is None:
            return
        m = self.metrics
        m.grpc_connections.set(srv.served)
        m.grpc_buffered.set(srv.buffered_total)
        m.catch_up(m.grpc_limits, "connection_refused", srv.refused_connections)
        m.catch_up(m.grpc_limits, "connection_evicted", srv.evicted_connections)
        m.catch_up(m.grpc_limits, "read_paused", srv.paused_reads)
        m.catch_up(m.grpc_limits, "message_late", srv.late_messages)

    def route(self, raw_path: str, q: dict[str, str]) -> Reply:
        path = raw_path.rstrip("/") or "/"
        if path == "/metrics":
            views = self.endpoints.views()
            self.metrics.stale.set(sum(1 for v in views if not v.fresh))
            self.metrics.endpoints.set(len(views))
            self.picker.llmd.refresh(views)
            self._cache_metrics()
            self._body_metrics()
            self._grpc_metrics()
            return Reply(200, generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST)
        if path == "/healthz":
            return text_reply(200, "ok\n")
        if path == "/readyz":
            ok = self.ready()
            return text_reply(200 if ok else 503, "ok\n" if ok else "not ready\n")
        if path == "/debug/endpoints":
            return json_reply(200, [v.__dict__ for v in self.endpoints.views()], indent=1)
        if path.startswith("/debug/explain"):
            rid = q.get("request_id") or path.removeprefix("/debug/explain").strip("/")
            if not rid:
                return json_reply(
                    400,
                    {
                        "error": "give ?request_id=ID (the request's x-request-id)",
                        "recent": self.picker.recent_ids(),
                    },
                    indent=1,
                )
            doc = self.picker.explain(rid)
            if doc is None:
                return json_reply(
                    404, {"error": f"no decision kept for request id {shown(rid)!r}"}, indent=1
                )
            return json_reply(200, doc, indent=1)
        return json_reply(404, {"error": f"no such path {shown(raw_path)!r}"}, indent=1)
