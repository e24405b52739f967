"""The collector's own HTTP endpoints: /metrics, /signals, /healthz, /readyz.

Routes only; the data comes from `CollectorState` and a Prometheus registry.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from bpf.state import CollectorState
from kvspread.httpbase import shown
from kvspread.opsserver import OpsServer, Reply, json_reply, text_reply
from kvspread.signals import encode_signals

__all__ = ["CollectorServer", "readiness"]


def readiness(
    state: CollectorState, started: bool, needs_kubernetes: bool = True
) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body) of /readyz: 503 until the first measurement cycle ran; then
    200, naming every missing source and why (the collector works with what it has),
    except while its Kubernetes source is down (its signals cannot be published, or its
    pod watch fails): 503 with the reason, so that `kubectl get pods` and rollouts show a
    collector whose node's signals go stale (issue 26); `needs_kubernetes` is False in
    standalone mode, where there is no API to fail."""
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
    kube = sources.get(KUBERNETES_SOURCE)
    if started and needs_kubernetes and kube is not None and not kube.up:
        body["ready"] = False
        body["why"] = f"kubernetes: {kube.reason}" if kube.reason else "kubernetes source down"
        return 503, body
    return (200 if started else 503), body


KUBERNETES_SOURCE = "kubernetes"
"""The source whose failure makes the collector unready: without the API server its one
output the scheduler reads, the node's signals, stops."""


class CollectorServer(OpsServer):
    """The collector's endpoints on host:port (`kvspread.opsserver` serves them)."""

    def __init__(
        self,
        state: CollectorState,
        registry: CollectorRegistry,
        host: str,
        port: int,
        is_started: Any = lambda: True,
        needs_kubernetes: bool = True,
    ) -> None:
        self.state = state
        self.needs_kubernetes = needs_kubernetes
        self.registry = registry
        self.is_started = is_started
        super().__init__(host, port, self.route, "collector-http")

    def route(self, path: str, query: dict[str, str]) -> Reply:
        if path == "/metrics":
            return Reply(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)
        if path == "/signals":
            sig = self.state.signals
            if sig is None:
                return json_reply(503, {"error": "no signals measured yet"})
            return Reply(200, encode_signals(sig).encode(), "application/json")
        if path == "/healthz":
            return text_reply(200, "ok\n")
        if path == "/readyz":
            return json_reply(
                *readiness(self.state, bool(self.is_started()), self.needs_kubernetes)
            )
        return json_reply(
            404, {"error": f"no such path {shown(path)}; try /metrics, /signals, /healthz, /readyz"}
        )
