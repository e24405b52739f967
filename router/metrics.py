"""The picker's own Prometheus metrics (served at the HTTP port's /metrics).

kvspread_router_picks_total{endpoint, reason}   counter: decisions; reason is one of
    scoring.REASONS (endpoint "" for no-endpoint, shed and bad requests)
kvspread_router_pick_duration_seconds           histogram: body parsed -> decision made
kvspread_router_stale_endpoints                 gauge: endpoints whose metrics are stale
kvspread_router_endpoints                       gauge: endpoints in the set
(both gauges are set when /metrics is read, not per request)
kvspread_router_sheds_total                     counter: requests refused with 429
kvspread_router_bad_requests_total              counter: bodies refused with 400
kvspread_router_prefix_index_entries            gauge: (endpoint, block) entries of the
    approximate prefix index
kvspread_router_prefix_index_bytes              gauge: its memory estimate (cache.memory_mib)
kvspread_router_cache_evictions_total{index}    counter: entries the bounded indexes
    forgot (index prefix or image)
kvspread_router_kv_events_total{outcome}        counter: KV-event messages in precise mode
    (applied, bad, gap)
kvspread_router_body_held_bytes                 gauge: request body bytes held now, against
    the total budget (server.max_bodies_bytes)
kvspread_router_body_refusals_total{code}       counter: bodies refused over a budget, 413
    (the request's) or 429 (the total)
kvspread_router_served_elsewhere_total          counter: requests the gateway reported
    served by another pool endpoint than the one picked (their load moved there)
kvspread_router_grpc_connections                gauge: gRPC connections the h2 server serves
kvspread_router_grpc_buffered_bytes             gauge: partial gRPC messages and frames held
    over all connections (bound: server.max_bodies_bytes)
kvspread_router_grpc_limits_total{limit}        counter: times an h2 server bound acted
    (connection_refused, connection_evicted, read_paused, message_late)
(the cache, body and gRPC series are brought up to date when /metrics is read, not per request;
the names are declared in kvspread/names.py, catalogued in observability/catalog.py)
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kvspread import names
from kvspread.names import MetricDescriptor

__all__ = ["RouterMetrics", "PICK_BUCKETS", "BODY_REFUSAL_CODES", "GRPC_LIMITS"]

BODY_REFUSAL_CODES = ("413", "429")
"""The `code` values of kvspread_router_body_refusals_total: over the request's body budget,
over the total one."""

GRPC_LIMITS = ("connection_refused", "connection_evicted", "read_paused", "message_late")
"""The `limit` values of kvspread_router_grpc_limits_total (router/h2grpc.py's bounds)."""

PICK_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1)


class RouterMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry

        def counter(d: MetricDescriptor, *labels: str) -> Counter:
            return Counter(d.prometheus, d.help, labels, registry=r)

        def gauge(d: MetricDescriptor) -> Gauge:
            return Gauge(d.prometheus, d.help, registry=r)

        self.picks = counter(names.ROUTER_PICKS, "endpoint", "reason")
        self.pick_seconds = Histogram(
            names.ROUTER_PICK_DURATION.prometheus,
            names.ROUTER_PICK_DURATION.help,
            buckets=PICK_BUCKETS,
            registry=r,
        )
        self.stale = gauge(names.ROUTER_STALE_ENDPOINTS)
        self.endpoints = gauge(names.ROUTER_ENDPOINTS)
        self.sheds = counter(names.ROUTER_SHEDS)
        self.bad = counter(names.ROUTER_BAD_REQUESTS)
        self.prefix_entries = gauge(names.ROUTER_PREFIX_ENTRIES)
        self.prefix_bytes = gauge(names.ROUTER_PREFIX_BYTES)
        self.evictions = counter(names.ROUTER_CACHE_EVICTIONS, "index")
        self.kv_events = counter(names.ROUTER_KV_EVENTS, "outcome")
        self.body_held = gauge(names.ROUTER_BODY_HELD)
        self.body_refusals = counter(names.ROUTER_BODY_REFUSALS, "code")
        self.served_elsewhere = counter(names.ROUTER_SERVED_ELSEWHERE)
        self.grpc_connections = gauge(names.ROUTER_GRPC_CONNECTIONS)
        self.grpc_buffered = gauge(names.ROUTER_GRPC_BUFFERED)
        self.grpc_limits = counter(names.ROUTER_GRPC_LIMITS, "limit")
        for code in BODY_REFUSAL_CODES:  # served at 0 from the start, so rate() has a base
            self.body_refusals.labels(code)
        for limit in GRPC_LIMITS:
            self.grpc_limits.labels(limit)
        self._seen: dict[tuple[int, str], float] = {}
        # picks.labels() takes a lock and builds a key per call; a pick asks for the same
        # few children again and again, so they are kept here
        self._pick_children: dict[tuple[str, str], Counter] = {}
        self._children_lock = threading.Lock()

    def catch_up(self, counter: Counter, label: str, total: float) -> None:
        """Bring `counter{label}` up to `total`, a count kept elsewhere (an index's)."""
        key = (id(counter), label)
        with self._children_lock:
            delta = total - self._seen.get(key, 0.0)
            if delta > 0:
                counter.labels(label).inc(delta)
                self._seen[key] = total

    def pick(self, endpoint: str, reason: str) -> Counter:
        """The picks counter's child for (endpoint, reason)."""
        key = (endpoint, reason)
        child = self._pick_children.get(key)
        if child is None:
            with self._children_lock:
                child = self._pick_children[key] = self.picks.labels(endpoint, reason)
        return child
