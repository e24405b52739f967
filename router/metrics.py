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
(the cache series are brought up to date when /metrics is read, not per request)
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
        self.prefix_entries = Gauge(
            "kvspread_router_prefix_index_entries",
            "Entries of the approximate prefix index",
            registry=r,
        )
        self.prefix_bytes = Gauge(
            "kvspread_router_prefix_index_bytes",
            "Memory estimate of the approximate prefix index",
            registry=r,
        )
        self.evictions = Counter(
            "kvspread_router_cache_evictions",
            "Entries the bounded cache indexes forgot",
            ["index"],
            registry=r,
        )
        self.kv_events = Counter(
            "kvspread_router_kv_events",
            "KV-cache event messages read in precise mode, by outcome",
            ["outcome"],
            registry=r,
        )
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
