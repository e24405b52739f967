"""llm-d's endpoint-picker metrics (`llm_d_epp_*`), beside kvspread's own, so llm-d's
dashboards and guides read the picker: names, types, labels and buckets as llm-d-router
defines them (pkg/epp/metrics/llm_d_router_metrics.go and metrics.go, commit ebab687927f5),
recorded where llm-d records them (declared in kvspread/names.py, catalogued in
observability/catalog.py, which renders docs/metrics.md):

llm_d_epp_request_total{model_name, target_model_name, fairness_id, priority}
    counter: requests routed (llm-d counts a request once it is scheduled)
llm_d_epp_request_error_total{model_name, target_model_name, fairness_id, priority, error_code}
    counter: requests refused, error_code llm-d's: BadRequest (400), ResourceExhausted
    (429), ServiceUnavailable (503)
llm_d_epp_scheduler_e2e_duration_seconds
    histogram: the choice (cache lookup and scoring), llm-d's buckets 0.1 ms .. 100 ms
llm_d_epp_scheduler_attempts_total{status, target_model_name, endpoint_name, namespace, port}
    counter: choices made (success, with the endpoint) or not possible (failure: no
    eligible endpoint, empty endpoint labels), as llm-d's RecordSchedulerAttempt
llm_d_epp_ready_endpoints{name}, llm_d_epp_average_kv_cache_utilization{name},
llm_d_epp_average_queue_size{name}, llm_d_epp_average_running_requests{name},
llm_d_epp_std_dev_kv_cache_utilization{name}, llm_d_epp_std_dev_queue_size{name},
llm_d_epp_std_dev_running_requests{name}
    gauges of the pool `name` (the InferencePool; "" without one) over the endpoints with
    fresh engine metrics, as llm-d's refreshPrometheusMetrics; set when /metrics is read;
    with no fresh endpoint only ready_endpoints changes (to 0), as there.

Not emitted, because the picker does not measure them: the response-side families (TTFT,
TPOT, ITL, output tokens, response sizes, request_duration_seconds, running requests),
which need the response phase the picker leaves to Envoy; flow control (no queue in the
picker); plugin latencies (no plugins). `model_name` and `target_model_name` are the
request's `model` (the picker rewrites no model), `priority` and `fairness_id` its
objective (router/objectives.py). Label values taken from requests are bounded as llm-d
bounds them: at most BOUNDED_VALUES distinct model names and fairness ids, later ones
"other" (and any over MAX_VALUE_CHARS characters); the endpoint labels follow the endpoint set (series of endpoints that left are
removed).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kvspread import names
from kvspread.names import MetricDescriptor
from router.endpoints import Endpoint
from router.objectives import Objective
from router.ranks import llm_d_rank_name
from router.scoring import EndpointView

__all__ = ["LlmdMetrics", "SCHEDULER_BUCKETS", "ERROR_CODES", "BOUNDED_VALUES", "OVERFLOW"]

SCHEDULER_BUCKETS: Final = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)
"""llm-d's llm_d_epp_scheduler_e2e_duration_seconds buckets."""
ERROR_CODES: Final = {400: "BadRequest", 429: "ResourceExhausted", 503: "ServiceUnavailable"}
"""HTTP status -> llm-d's error_code (pkg/common/error/error.go)."""
BOUNDED_VALUES: Final = 1000
"""Distinct request-derived label values kept (llm-d's maxModelLabelValues)."""
CHILDREN_KEPT: Final = 4096
"""Label children kept per family for reuse (the cache is emptied when full)."""
OVERFLOW: Final = "other"
"""The value past the bound (llm-d's overflowValue)."""
MAX_VALUE_CHARS: Final = 256
"""A longer model name is counted as OVERFLOW (a label value of any size is memory)."""

_REQUEST_LABELS: Final = names.LLMD_REQUEST_LABELS


_POOL_STATS: Final = (
    ("kv_usage", names.LLMD_AVG_KV_CACHE, names.LLMD_SD_KV_CACHE),
    ("waiting", names.LLMD_AVG_QUEUE, names.LLMD_SD_QUEUE),
    ("running", names.LLMD_AVG_RUNNING, names.LLMD_SD_RUNNING),
)
"""(EndpointView field, its mean's gauge, its standard deviation's gauge)."""


class _Bounded:
    """At most `limit` distinct values; a value once admitted stays itself."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen: set[str] = set()

    def __call__(self, value: str) -> str:
        if not value or value in self.seen:
            return value
        if len(self.seen) >= self.limit or len(value) > MAX_VALUE_CHARS:
            return OVERFLOW
        self.seen.add(value)
        return value


def _endpoint_labels(ep: Endpoint | None, address: str) -> tuple[str, str, str]:
    """(endpoint_name, namespace, port) as llm-d writes them: `pod-rank-i`, else the address."""
    port = address.rpartition(":")[2]
    if ep is None or not ep.pod:
        return address, ep.namespace if ep else "", port
    return llm_d_rank_name(ep.pod, ep.rank), ep.namespace, port


def _mean_sd(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


class LlmdMetrics:
    """The `llm_d_epp_*` families on `registry` (the picker's, served at /metrics)."""

    def __init__(self, registry: CollectorRegistry, pool_name: str = "") -> None:
        r = registry
        self.pool = pool_name

        def counter(d: MetricDescriptor, labels: tuple[str, ...]) -> Counter:
            return Counter(d.prometheus, d.help, labels, registry=r)

        def gauge(d: MetricDescriptor) -> Gauge:
            return Gauge(d.prometheus, d.help, names.LLMD_POOL_LABELS, registry=r)

        self.requests = counter(names.LLMD_REQUESTS, _REQUEST_LABELS)
        self.errors = counter(names.LLMD_REQUEST_ERRORS, (*_REQUEST_LABELS, "error_code"))
        self.scheduler_seconds = Histogram(
            names.LLMD_SCHEDULER_DURATION.prometheus,
            names.LLMD_SCHEDULER_DURATION.help,
            buckets=SCHEDULER_BUCKETS,
            registry=r,
        )
        self.attempts = counter(names.LLMD_SCHEDULER_ATTEMPTS, names.LLMD_ATTEMPT_LABELS)
        self.ready = gauge(names.LLMD_READY_ENDPOINTS)
        self._stats = [(field, gauge(mean), gauge(sd)) for field, mean, sd in _POOL_STATS]
        self._models = _Bounded(BOUNDED_VALUES)
        self._fairness = _Bounded(BOUNDED_VALUES)
        self._lock = threading.Lock()
        # labels() takes a lock and builds a key per call; a pick asks for the same few
        # children again and again, so they are kept (at most CHILDREN_KEPT of each)
        self._request_children: dict[tuple[str, str, int], Counter] = {}
        self._attempt_children: dict[tuple[str, str], tuple[tuple[str, ...], Counter]] = {}
        self._series: dict[str, set[tuple[str, ...]]] = {}  # attempt series by address

    def _request_labels(self, model: str, o: Objective) -> tuple[str, str, str, str]:
        with self._lock:
            m = self._models(model)
            return m, m, self._fairness(o.fairness_id), str(o.priority)

    def routed(
        self, model: str, o: Objective, address: str, ep: Endpoint | None, seconds: float
    ) -> None:
        """A request the choice sent to `address` (its endpoint `ep`)."""
        rkey = (model, o.fairness_id, o.priority)
        req = self._request_children.get(rkey)
        if req is None:
            labels = self._request_labels(model, o)
            req = self.requests.labels(*labels)
            with self._lock:
                if len(self._request_children) >= CHILDREN_KEPT:
                    self._request_children.clear()
                self._request_children[rkey] = req
        req.inc()
        self.scheduler_seconds.observe(seconds)
        akey = (address, model)
        kept = self._attempt_children.get(akey)
        if kept is None:
            with self._lock:
                target = self._models(model)
            alabels = ("success", target, *_endpoint_labels(ep, address))
            kept = (alabels, self.attempts.labels(*alabels))
            with self._lock:
                if len(self._attempt_children) >= CHILDREN_KEPT:
                    self._attempt_children.clear()
                self._attempt_children[akey] = kept
                self._series.setdefault(address, set()).add(alabels)
        kept[1].inc()

    def refused(self, model: str, o: Objective, status: int, seconds: float | None) -> None:
        """A request refused with `status`; `seconds` is the choice's time when one was tried
        and found no endpoint (a scheduling failure), None when no choice was tried."""
        labels = self._request_labels(model, o)
        self.errors.labels(*labels, ERROR_CODES.get(status, "Unknown")).inc()
        if seconds is not None:
            self.scheduler_seconds.observe(seconds)
            self.attempts.labels("failure", labels[1], "", "", "").inc()

    def keep_only(self, addresses: Iterable[str]) -> None:
        """Remove the attempt series of endpoints that left the set (bounded by the set)."""
        keep = set(addresses)
        with self._lock:
            self._attempt_children = {
                k: v for k, v in self._attempt_children.items() if k[0] in keep
            }
            for address in [a for a in self._series if a not in keep]:
                for labels in self._series.pop(address):
                    self.attempts.remove(*labels)

    def refresh(self, views: list[EndpointView]) -> None:
        """The pool gauges from the endpoints with fresh metrics (when /metrics is read)."""
        fresh = [v for v in views if v.fresh]
        self.ready.labels(self.pool).set(len(fresh))
        for field, mean_g, sd_g in self._stats:
            known = [x for x in (getattr(v, field) for v in fresh) if x is not None]
            if known:
                mean, sd = _mean_sd(known)
                mean_g.labels(self.pool).set(mean)
                sd_g.labels(self.pool).set(sd)
