"""Bounded in-memory aggregation of what the probes measured, read at scrape time.

`HistogramTable`: explicit-bucket histograms per label set, at most `max_series` label
sets (further ones are counted as dropped, never stored). `RecentWindow`: the last
`window_s` seconds of requests, for p95 latency and the image-token share of the node
signals, bounded in length. `CounterTable`: bounded counters (connection edges).
Thread-safe: the event thread writes, scrapes read.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvspread import names

__all__ = [
    "DURATION_BUCKETS",
    "QUEUE_BUCKETS",
    "HistogramState",
    "HistogramTable",
    "CounterTable",
    "RecentWindow",
    "quantile",
]

DURATION_BUCKETS: tuple[float, ...] = names.LATENCY_BUCKETS
"""The shared latency bounds (kvspread.names.LATENCY_BUCKETS)."""

QUEUE_BUCKETS: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)
"""Accept-queue delay bounds: 100 us .. 5 s."""

Labels = tuple[tuple[str, str], ...]


@dataclass
class HistogramState:
    buckets: list[int]  # per-bucket (not cumulative) counts; last is +Inf
    total: float = 0.0
    count: int = 0
    min: float = math.inf  # of the values recorded (OTLP histogram points carry them)
    max: float = -math.inf

    def cumulative(self) -> list[int]:
        out, acc = [], 0
        for c in self.buckets:
            acc += c
            out.append(acc)
        return out


BULK_VALUES = 32
"""From this many values of one label set, `observe_many` works on an array."""


class HistogramTable:
    def __init__(self, bounds: Sequence[float], max_series: int = 2000) -> None:
        self.bounds = tuple(bounds)
        self._bounds_arr: np.ndarray | None = None
        self.max_series = max_series
        self.dropped = 0
        self._series: dict[Labels, HistogramState] = {}
        self._lock = threading.Lock()

    def observe(self, labels: Labels, value: float) -> bool:
        """Record `value`; False (and counted) when the table is full for a new label set."""
        if not math.isfinite(value):
            return False
        with self._lock:
            st = self._series.get(labels)
            if st is None:
                if len(self._series) >= self.max_series:
                    self.dropped += 1
                    return False
                st = HistogramState(buckets=[0] * (len(self.bounds) + 1))
                self._series[labels] = st
            st.buckets[bisect.bisect_left(self.bounds, value)] += 1
            st.total += value
            st.count += 1
            st.min = min(st.min, value)
            st.max = max(st.max, value)
            return True

    def observe_many(self, labels: Labels, values: Sequence[float]) -> int:
        """Record several values of one label set under one lock (the event thread hands
        over a poll's worth at a time); returns how many were recorded: not the non-finite
        ones, none when the table is full for a new label set (counted once per value)."""
        with self._lock:
            st = self._series.get(labels)
            if st is None:
                if len(self._series) >= self.max_series:
                    self.dropped += len(values)
                    return 0
                st = HistogramState(buckets=[0] * (len(self.bounds) + 1))
                self._series[labels] = st
            if len(values) >= BULK_VALUES:
                arr = np.asarray(values, dtype=np.float64)
                if np.isfinite(arr).all():
                    return self._observe_bulk(st, arr)
            buckets, bounds, where = st.buckets, self.bounds, bisect.bisect_left
            n, total = 0, 0.0
            lo, hi = st.min, st.max
            for v in values:
                if math.isfinite(v):
                    buckets[where(bounds, v)] += 1
                    total += v
                    n += 1
                    lo = v if v < lo else lo
                    hi = v if v > hi else hi
            st.total += total
            st.count += n
            st.min, st.max = lo, hi
            return n

    def _observe_bulk(self, st: HistogramState, arr: np.ndarray) -> int:
        """`observe_many` of finite values in a few array operations: the same buckets
        (searchsorted left is bisect_left), the same sum (cumsum adds in order, as the
        loop does), min and max."""
        if self._bounds_arr is None:
            self._bounds_arr = np.asarray(self.bounds, dtype=np.float64)
        counts = np.bincount(
            np.searchsorted(self._bounds_arr, arr, side="left"), minlength=len(st.buckets)
        ).tolist()
        buckets = st.buckets
        for i, c in enumerate(counts):
            if c:
                buckets[i] += c
        st.total += float(np.cumsum(arr)[-1])
        st.count += len(arr)
        lo, hi = float(arr.min()), float(arr.max())
        st.min = lo if lo < st.min else st.min
        st.max = hi if hi > st.max else st.max
        return len(arr)

    def snapshot(self) -> dict[Labels, HistogramState]:
        with self._lock:
            return {
                k: HistogramState(list(v.buckets), v.total, v.count, v.min, v.max)
                for k, v in self._series.items()
            }

    def __len__(self) -> int:
        return len(self._series)


class CounterTable:
    def __init__(self, max_series: int = 4096) -> None:
        self.max_series = max_series
        self.dropped = 0
        self._c: dict[Labels, float] = {}
        self._lock = threading.Lock()

    def add(self, labels: Labels, amount: float = 1.0) -> None:
        with self._lock:
            if labels not in self._c and len(self._c) >= self.max_series:
                self.dropped += 1
                return
            self._c[labels] = self._c.get(labels, 0.0) + amount

    def snapshot(self) -> dict[Labels, float]:
        with self._lock:
            return dict(self._c)


def quantile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank quantile (q in 0..1) of the values; None for no values."""
    if not values:
        return None
    s = sorted(values)
    rank = max(1, math.ceil(q * len(s)))
    return s[rank - 1]


_Recent = tuple[float, float, int]
"""(seen at, duration s, image parts): a plain tuple, one per request. Not a NamedTuple:
the collector's cyclic GC untracks exact tuples of numbers, never a tuple subclass, so a
full window of those would be rescanned at every collection."""


class RecentWindow:
    """Requests of the last `window_s` seconds (at most `max_items`, oldest dropped)."""

    def __init__(self, window_s: float = 60.0, max_items: int = 20000) -> None:
        self.window_s = window_s
        self._items: deque[_Recent] = deque(maxlen=max_items)
        self._lock = threading.Lock()

    def add(self, at: float, duration_s: float, images: int) -> None:
        with self._lock:
            self._items.append((at, duration_s, images))

    def add_many(self, at: float, items: Sequence[tuple[float, int]]) -> None:
        """(duration, image parts) of several requests seen at `at`, under one lock."""
        with self._lock:
            self._items.extend([(at, d, i) for d, i in items])

    def _live(self, now: float) -> list[_Recent]:
        with self._lock:
            while self._items and self._items[0][0] < now - self.window_s:
                self._items.popleft()
            return list(self._items)

    def p95(self, now: float) -> float | None:
        return quantile([r[1] for r in self._live(now)], 0.95)

    def counts(self, now: float) -> tuple[int, int]:
        """(requests, image parts) in the window."""
        live = self._live(now)
        return len(live), sum(r[2] for r in live)
