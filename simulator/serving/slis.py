"""The SLIs the HPA scales on, computed with the metrics adapter's own SLI code.

The simulated collector keeps, per service, what the real one exports: a cumulative
latency histogram (explicit buckets, OTel shape) of successful requests, cumulative
request and error counters, and queue-depth and KV-usage gauges. It takes a snapshot every
push period; at each HPA sync the adapter's functions (`metrics_adapter.sli`) turn the
snapshots of the last window into the external metric values of docs/design.md section 6.
Nothing here re-implements a quantile or a rate.
"""

from __future__ import annotations

import math
from collections import deque

from metrics_adapter import sli

__all__ = ["LATENCY_BOUNDS_S", "ServiceMetrics"]

LATENCY_BOUNDS_S: tuple[float, ...] = (
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    3.0,
    5.0,
    8.0,
    10.0,
    15.0,
    20.0,
    30.0,
    45.0,
    60.0,
    90.0,
    120.0,
    180.0,
    300.0,
    600.0,
)
"""End-to-end request latency buckets (seconds). LLM requests take seconds, so the OTel
HTTP defaults (which stop at 10 s) would put most of them in +Inf; 0.2 s is a bound so
that the good-request rate at the design's 0.2 s threshold is exact."""


class ServiceMetrics:
    """One service's collector-side instruments and their pushed snapshots."""

    def __init__(self, keep_s: float = 600.0, bounds: tuple[float, ...] = LATENCY_BOUNDS_S) -> None:
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._sum = 0.0
        self.requests = 0
        self.errors = 0
        self.keep_s = keep_s
        self.hist: deque[tuple[float, sli.ExplicitHistogram]] = deque()
        self.req_samples: deque[tuple[float, float]] = deque()
        self.err_samples: deque[tuple[float, float]] = deque()
        self.queue: deque[tuple[float, float]] = deque()
        self.kv: deque[tuple[float, float]] = deque()

    def observe(self, latency_s: float, ok: bool) -> None:
        """One finished request (failed ones count as requests and errors only)."""
        self.requests += 1
        if not ok:
            self.errors += 1
            return
        i = 0
        n = len(self.bounds)
        while i < n and latency_s > self.bounds[i]:
            i += 1
        self._counts[i] += 1
        self._sum += latency_s

    def push(self, t: float, queue_depth: float, kv_usage: float | None) -> None:
        """Snapshot what an OTLP push would carry at time t."""
        self.hist.append(
            (
                t,
                sli.ExplicitHistogram(
                    self.bounds, tuple(float(c) for c in self._counts), self._sum
                ),
            )
        )
        self.req_samples.append((t, float(self.requests)))
        self.err_samples.append((t, float(self.errors)))
        self.queue.append((t, float(queue_depth)))
        if kv_usage is not None:
            self.kv.append((t, kv_usage))
        for dq in (self.hist, self.req_samples, self.err_samples, self.queue, self.kv):
            while dq and dq[0][0] < t - self.keep_s:
                dq.popleft()

    def value(
        self, metric: str, now: float, window_s: float, good_threshold_s: float
    ) -> float | None:
        """The external metric `metric` over (now - window, now]; None when not computable
        (the adapter would answer 404 and the HPA would skip the metric)."""
        start = now - window_s
        if metric == "kvspread_requests_per_second":
            return sli.rate(list(self.req_samples), start, now, extrapolation="none")
        if metric == "kvspread_error_ratio":
            errs = sli.increase(list(self.err_samples), start, now, extrapolation="none")
            reqs = sli.increase(list(self.req_samples), start, now, extrapolation="none")
            return sli.ratio(errs, reqs)
        if metric in ("kvspread_queue_depth", "kvspread_kv_cache_usage_ratio"):
            series = self.queue if metric == "kvspread_queue_depth" else self.kv
            return series[-1][1] if series and series[-1][0] > start else None
        window = sli.histogram_increase(list(self.hist), start, now)
        if window is None:
            return None
        delta, seconds = window
        if metric == "kvspread_good_requests_per_second":
            return sli.good_rate(delta, seconds, good_threshold_s)
        q = {
            "kvspread_request_latency_p50_seconds": 0.5,
            "kvspread_request_latency_p95_seconds": 0.95,
            "kvspread_request_latency_p99_seconds": 0.99,
        }.get(metric)
        if q is None:
            raise ValueError(f"unknown SLI {metric!r}")
        if delta.count <= 0:
            return None
        v = sli.histogram_quantile(q, delta)
        return None if math.isnan(v) else v
