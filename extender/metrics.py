"""The extender's own Prometheus metrics (names and help in kvspread/names.py).

One `CollectorRegistry` per server instance (tests start many). Term histograms are
accumulated with numpy over every scored node of a request and exposed by a custom
collector at scrape time: observing 5,000 nodes x 5 terms one call at a time would
cost more than the scoring itself.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

from extender.model import SIGNAL_STATES
from kvspread import names

__all__ = ["ExtenderMetrics", "TERM_BUCKETS"]

TERM_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _TermHistograms(Collector):
    """Histogram of each score term's value over all scored nodes (bulk numpy updates)."""

    def __init__(self, terms: tuple[str, ...]) -> None:
        self._lock = threading.Lock()
        self._edges = np.array(TERM_BUCKETS)
        self._counts = {t: np.zeros(len(TERM_BUCKETS), dtype=np.int64) for t in terms}
        self._sums = dict.fromkeys(terms, 0.0)

    def observe_many(self, values: Mapping[str, np.ndarray]) -> None:
        """Count every finite value of each term (one search and one count for all terms:
        a value's bucket index is offset by its term's row)."""
        if not values:
            return
        terms = list(values)
        v = np.stack([values[t] for t in terms])  # (T, N)
        finite = np.isfinite(v)
        e = len(self._edges)
        idx = np.searchsorted(self._edges, v, side="left")
        idx = np.where(finite, idx, e) + (e + 1) * np.arange(len(terms))[:, None]
        counts = np.bincount(idx.ravel(), minlength=(e + 1) * len(terms)).reshape(len(terms), -1)
        sums = np.where(finite, v, 0.0).sum(axis=1)
        with self._lock:
            for k, t in enumerate(terms):
                self._counts[t] += counts[k, :e]
                self._sums[t] += float(sums[k])

    def collect(self) -> Iterator[HistogramMetricFamily]:
        fam = HistogramMetricFamily(
            names.EXTENDER_SCORE_TERM.prometheus,
            names.EXTENDER_SCORE_TERM.help,
            labels=["term"],
        )
        with self._lock:
            for t, counts in self._counts.items():
                cum = np.cumsum(counts)
                buckets = [(str(e), float(c)) for e, c in zip(TERM_BUCKETS, cum, strict=True)]
                buckets[-1] = ("+Inf", float(cum[-1]))
                fam.add_metric([t], buckets, self._sums[t])
        yield fam


class ExtenderMetrics:
    """Request counts and latency per verb, filter reasons, terms, signals, cache state."""

    def __init__(self, terms: tuple[str, ...]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry

        def counter(m: names.MetricDescriptor, label: str) -> Counter:
            return Counter(m.prometheus, m.help, [label], registry=r)

        self.requests = Counter(
            names.EXTENDER_REQUESTS.prometheus,
            names.EXTENDER_REQUESTS.help,
            ["verb", "code"],
            registry=r,
        )
        self.duration = Histogram(
            names.EXTENDER_REQUEST_DURATION.prometheus,
            names.EXTENDER_REQUEST_DURATION.help,
            ["verb"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.filter_failures = counter(names.EXTENDER_FILTER_FAILURES, "reason")
        self.signals = counter(names.EXTENDER_SIGNALS, "state")
        self.cache_synced = Gauge(
            names.EXTENDER_CACHE_SYNCED.prometheus,
            names.EXTENDER_CACHE_SYNCED.help,
            ["resource"],
            registry=r,
        )
        self.filter_decisions = counter(names.EXTENDER_FILTER_DECISIONS, "outcome")
        self.prioritize_decisions = counter(names.EXTENDER_PRIORITIZE_DECISIONS, "outcome")
        self.terms = _TermHistograms(terms)
        r.register(self.terms)

    def count_signals(self, codes: np.ndarray, unknown: int) -> None:
        """Count nodes by signal state (codes index SIGNAL_STATES) plus unknown nodes."""
        if len(codes):
            counts = np.bincount(codes.astype(np.intp), minlength=len(SIGNAL_STATES))
            for state, c in zip(SIGNAL_STATES, counts, strict=True):
                if c:
                    self.signals.labels(state).inc(int(c))
        if unknown:
            self.signals.labels("unknown").inc(unknown)
