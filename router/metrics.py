"""The picker's own Prometheus metrics (served at the HTTP port's /metrics).

kvspread_router_picks_total{endpoint, reason}   counter: decisions; reason is one of
    scoring.REASONS (endpoint "" for no-endpoint, shed and bad requests)
kvspread_router_pick_duration_seconds           histogram: body parsed -> decision made
kvspread_router_stale_endpoints                 gauge: endpoints whose metrics are stale
kvspread_router_endpoints                       gauge: endpoints in the set
(both gauges are set when /metrics is read, not per request)
kvspread_router_sheds_total                     counter: requests refused with 429
kvspread_router_bad_requests_total              counter: bodies refused with 400
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["RouterMetrics", "PICK_BUCKETS"]

PICK_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1)


class RouterMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.picks = Counter(
            "kvspread_router_picks",
            "Endpoint picks by endpoint and reason",
            ["endpoint", "reason"],
            registry=r,
        )
        self.pick_seconds = Histogram(
            "kvspread_router_pick_duration_seconds",
            "Time from the complete request body to the decision",
            buckets=PICK_BUCKETS,
            registry=r,
        )
        self.stale = Gauge(
            "kvspread_router_stale_endpoints", "Endpoints with stale engine metrics", registry=r
        )
        self.endpoints = Gauge("kvspread_router_endpoints", "Endpoints in the set", registry=r)
        self.sheds = Counter("kvspread_router_sheds", "Requests refused with 429", registry=r)
        self.bad = Counter(
            "kvspread_router_bad_requests", "Request bodies refused with 400", registry=r
        )
        # picks.labels() takes a lock and builds a key per call; a pick asks for the same
        # few children again and again, so they are kept here
        self._pick_children: dict[tuple[str, str], Counter] = {}
        self._children_lock = threading.Lock()

    def pick(self, endpoint: str, reason: str) -> Counter:
        """The picks counter's child for (endpoint, reason)."""
        key = (endpoint, reason)
        child = self._pick_children.get(key)
        if child is None:
            with self._children_lock:
                child = self._pick_children[key] = self.picks.labels(endpoint, reason)
        return child
