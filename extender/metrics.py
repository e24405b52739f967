"""The extender's own Prometheus metrics (names and help in kvspread/names.py).

One `CollectorRegistry` per server instance (tests start many). Term histograms are
accumulated with numpy over every scored node of a request (of a few requests together at
small clusters) and exposed by a custom collector at scrape time: observing 5,000 nodes x 5
terms one call at a time would cost more than the scoring itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from extender.model import SIGNAL_STATES
from kvspread import names

__all__ = ["ExtenderMetrics", "TERM_BUCKETS"]

TERM_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


_EDGES = np.array(TERM_BUCKETS)
_PADDED = np.concatenate(([-np.inf], _EDGES, [np.inf]))
_TENTHS = bool(np.array_equal(_EDGES, np.arange(1, 11) / 10))


def _bucket(v: np.ndarray) -> np.ndarray:
    """`np.searchsorted(TERM_BUCKETS, v, side="left")` (how many edges lie below each
    finite value) in a third of the time: the tenth a value falls in, corrected by one
    against the edges on either side (10 v can round across an edge, never past the next).
    Other edges than the tenths take searchsorted itself."""
    if not _TENTHS:
        found: np.ndarray = np.searchsorted(_EDGES, v, side="left")
        return found
    k = np.clip(v, 0.0, 1.0)
    k *= 10.0
    k = k.astype(np.intp)  # 0..10
    below_not: np.ndarray = _PADDED[k] >= v  # the edge below is not below v
    above: np.ndarray = _PADDED[k + 1] < v  # the edge above is below v
    out: np.ndarray = (k - below_not) + above  # not in place: += of a bool array is slow
    return out


class _Counts(Collector):
    """A counter family read at scrape time from `source()` (counts kept by their owner,
    the ledger, under its own lock)."""

    def __init__(self, metric: names.MetricDescriptor, label: str) -> None:
        self._metric = metric
        self._label = label
        self.source: Callable[[], Mapping[str, int]] = dict

    def collect(self) -> Iterator[CounterMetricFamily]:
        fam = CounterMetricFamily(
            self._metric.prometheus.removesuffix("_total"), self._metric.help, labels=[self._label]
        )
        for value, count in sorted(self.source().items()):
            fam.add_metric([value], count)
        yield fam


class _TermHistograms(Collector):
    """Histogram of each score term's value over all scored nodes (bulk numpy updates)."""

    PENDING = 64
    """Requests whose term values wait to be counted, at most (then counted together)..."""
    PENDING_VALUES = 16_384
    """... and values: 6 terms x 500 nodes wait for five requests, 6 x 5,000 are counted at once
    (the fixed cost is then small against the per-value one)."""

    def __init__(self, terms: tuple[str, ...]) -> None:
        self._lock = threading.Lock()
        self._edges = np.array(TERM_BUCKETS)
        self._counts = {t: np.zeros(len(TERM_BUCKETS), dtype=np.int64) for t in terms}
        self._sums = dict.fromkeys(terms, 0.0)
        self._pending: list[tuple[tuple[str, ...], tuple[np.ndarray, ...]]] = []
        self._pending_values = 0

    def observe_many(self, values: Mapping[str, np.ndarray]) -> None:
        """Count every finite value of each term. The values of up to `PENDING` requests
        wait and are counted together (one search and one count for all of them; a scrape
        counts what waits first): counting costs the same fixed dozen numpy calls for 500
        values as for 30,000. The arrays are kept, not copied: the scorer never changes
        them."""
        if not values:
            return
        terms = tuple(values)
        arrays = tuple(values[t] for t in terms)
        with self._lock:
            self._pending.append((terms, arrays))
            self._pending_values += len(terms) * len(arrays[0])
            if len(self._pending) >= self.PENDING or self._pending_values >= self.PENDING_VALUES:
                self._count_pending()

    def _count_pending(self) -> None:
        """Count the waiting values into the histograms (lock held): requests with the
        same terms and node count in one pass, in arrival order, so that the sums add up
        request by request exactly as when each is counted at once."""
        pending, self._pending = self._pending, []
        self._pending_values = 0
        e = len(self._edges)
        start = 0
        while start < len(pending):
            terms, first = pending[start]
            end = start + 1
            while (
                end < len(pending)
                and pending[end][0] == terms
                and len(pending[end][1][0]) == len(first[0])
            ):
                end += 1
            v = np.array([arrays for _, arrays in pending[start:end]], dtype=np.float64)
            start = end
            finite = np.isfinite(v)  # (R, T, N)
            v = np.where(finite, v, 0.0)
            idx = _bucket(v)
            idx = np.where(finite, idx, e) + (e + 1) * np.arange(len(terms))[:, None]
            counts = np.bincount(idx.ravel(), minlength=(e + 1) * len(terms))
            counts = counts.reshape(len(terms), -1)
            sums = v.sum(axis=2)  # (R, T): each request's own sums
            for k, t in enumerate(terms):
                self._counts[t] += counts[k, :e]
                total = self._sums[t]
                for r in sums[:, k].tolist():
                    total += r
                self._sums[t] = total

    def collect(self) -> Iterator[HistogramMetricFamily]:
        fam = HistogramMetricFamily(
            names.EXTENDER_SCORE_TERM.prometheus,
            names.EXTENDER_SCORE_TERM.help,
            labels=["term"],
        )
        with self._lock:
            if self._pending:
                self._count_pending()
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
        self.ledger_bindings = _Counts(names.EXTENDER_LEDGER_BINDINGS, "outcome")
        r.register(self.ledger_bindings)
        self.connections_refused = _Counts(names.EXTENDER_CONNECTIONS_REFUSED, "reason")
        """Read from the connection bounds' counts (extender/connections.py; set by run.py)."""
        r.register(self.connections_refused)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def count_signals(self, codes: np.ndarray, unknown: int) -> None:
        """Count nodes by signal state (codes index SIGNAL_STATES) plus unknown nodes."""
        if len(codes):
            counts = np.bincount(codes, minlength=len(SIGNAL_STATES)).tolist()
            for state, c in zip(SIGNAL_STATES, counts, strict=True):
                if c:
                    self.child(self.signals, state).inc(c)
        if unknown:
            self.child(self.signals, "unknown").inc(unknown)

    def child(self, metric: Counter | Histogram, *labels: str) -> Any:
        """`metric.labels(*labels)`, looked up once (prometheus_client's `labels()` checks
        and joins its arguments on every call: several microseconds each, on every
        request)."""
        key = (id(metric), labels)
        got = self._children.get(key)
        if got is None:
            got = self._children[key] = metric.labels(*labels)
        return got
