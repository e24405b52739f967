"""The windowed series store behind the OTLP receiver.

Each series (metric name + attributes) keeps only the points inside its retention (the
longest rule window plus slack), packed in one flat `array('d')` per series so that memory
stays near 1 KiB for a 15-bucket histogram with a 1-minute window at a 10 s push interval.
Stored values are always *cumulative*: delta points are added to the previous stored
point on arrival; counter resets stay visible as drops, which `sli` handles as Prometheus
does. When a cumulative series appears, or restarts, with a start time inside the retention,
a zero point is inserted at its start time (what Prometheus calls created-timestamp zero
injection), so the first push after a restart already yields a rate.

Bounded memory: at most `max_series` series, whose attribute keys and values add up to at
most `max_label_bytes` characters (`MAX_LABEL_BYTES`, 256 Mi: about 1.3 KiB a series at the
series cap; a count alone let series of 4 KiB attributes take 800 MB); inserting one more
evicts the least recently written series and counts it in `dropped`. Series not written for `idle_expiry` seconds
are removed by `expire()`.

Thread-safety: every public method takes the store's lock, so the receiver and the API
server may run in different threads.
"""

from __future__ import annotations

import sys
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final

from kvspread import names
from metrics_adapter.sli import ExponentialHistogram

__all__ = [
    "SeriesStore",
    "MAX_LABEL_BYTES",
    "Series",
    "Point",
    "Run",
    "GAUGE",
    "SUM",
    "HISTOGRAM",
    "EXP_HISTOGRAM",
    "canonical_attrs",
    "canonical_pair",
]

MAX_LABEL_BYTES: Final = 256 << 20
"""Default `SeriesStore.max_label_bytes`: attribute characters over all stored series."""
GAUGE: Final = 0
SUM: Final = 1
HISTOGRAM: Final = 2
EXP_HISTOGRAM: Final = 3
KIND_NAMES: Final = {
    GAUGE: "gauge",
    SUM: "sum",
    HISTOGRAM: "histogram",
    EXP_HISTOGRAM: "exponential histogram",
}

Attrs = tuple[tuple[str, str], ...]

_PAIRS: dict[tuple[str, str], tuple[str, str]] = {}
_PAIRS_MAX = 200_000
_PAIRS_MAX_CHARS: Final = 64 << 20
"""Characters the pair table may hold before it starts again empty (pairs that series
hold stay alive with them): a count alone let 200,000 pairs of 4 KiB hold 800 MB."""
_PAIRS_CHARS = [0]


def canonical_pair(k: str, v: str) -> tuple[str, str]:
    """One shared (key, value) tuple per distinct attribute, strings interned: series that
    share attributes share their memory (a pod name is the only per-series string)."""
    p = _PAIRS.get((k, v))
    if p is None:
        if len(_PAIRS) >= _PAIRS_MAX or _PAIRS_CHARS[0] >= _PAIRS_MAX_CHARS:
            _PAIRS.clear()
            _PAIRS_CHARS[0] = 0
        p = _PAIRS[(k, v)] = (sys.intern(k), sys.intern(v) if len(v) < 64 else v)
        _PAIRS_CHARS[0] += len(k) + len(v)
    return p


def canonical_attrs(attrs: Attrs) -> Attrs:
    """The same attributes built from shared, interned pairs (see `canonical_pair`)."""
    return tuple([canonical_pair(k, v) for k, v in attrs])


@dataclass(slots=True)
class Point:
    """One validated data point, ready to store (what the receiver decodes to)."""

    metric: str
    kind: int
    attrs: Attrs
    t: float
    start: float
    values: Sequence[float]  # scalar: (v,); histogram: non-cumulative bucket counts
    delta: bool = False
    monotonic: bool = False
    bounds: tuple[float, ...] = ()
    exp: ExponentialHistogram | None = None


class Series:
    """One stored series. Points are flat in `data`: t, v0, v1, ... per point."""

    __slots__ = (
        "metric", "kind", "attrs", "namespace", "bounds", "stride", "data", "start",
        "last_seen", "monotonic", "exp_points", "_attr_map", "_labels_key", "_labels",
        "label_bytes",
    )  # fmt: skip

    def __init__(
        self, metric: str, kind: int, attrs: Attrs, namespace: str, bounds: tuple[float, ...]
    ):
        self.metric = metric
        self.kind = kind
        self.attrs = attrs
        self.namespace = namespace
        self.bounds = bounds
        self.stride = 1 + (len(bounds) + 1 if kind == HISTOGRAM else 1)
        self.data = array("d")
        self.start = 0.0
        self.last_seen = 0.0
        self.monotonic = False
        self.exp_points: list[tuple[float, ExponentialHistogram]] | None = (
            [] if kind == EXP_HISTOGRAM else None
        )
        self._attr_map: dict[str, str] | None = None
        self._labels_key: object = None
        self._labels: dict[str, str] | None = None  # one dict fewer per unread series
        self.label_bytes = sum(len(k) + len(v) for k, v in attrs)
        """Characters of its attribute keys and values (`SeriesStore.max_label_bytes`)."""

    def attr_map(self) -> dict[str, str]:
        m = self._attr_map
        if m is None:
            m = self._attr_map = dict(self.attrs)
        return m

    def labels(self, mapping: tuple[tuple[str, str], ...]) -> dict[str, str]:
        """Selector labels of this series under an attribute -> label mapping (cached)."""
        if self._labels_key is not mapping:
            attrs = self.attr_map()
            self._labels = {label: attrs[a] for a, label in mapping if a in attrs}
            self._labels_key = mapping
        assert self._labels is not None
        return self._labels

    def __len__(self) -> int:
        if self.exp_points is not None:
            return len(self.exp_points)
        return len(self.data) // self.stride

    def last_time(self) -> float:
        if self.exp_points is not None:
            return self.exp_points[-1][0] if self.exp_points else 0.0
        return self.data[-self.stride] if self.data else 0.0

    def scalars(self) -> list[tuple[float, float]]:
        """(t, cumulative or gauge value) for scalar series."""
        d = self.data
        return [(d[i], d[i + 1]) for i in range(0, len(d), 2)]

    def histograms(self) -> list[tuple[float, tuple[float, ...]]]:
        """(t, cumulative bucket counts, non-cumulative across buckets) for histograms."""
        d, s = self.data, self.stride
        return [(d[i], tuple(d[i + 1 : i + s])) for i in range(0, len(d), s)]

    def _trim(self, horizon: float) -> None:
        d, s = self.data, self.stride
        n = 0
        # keep one point at or before the horizon so a window edge has a left neighbour
        while len(d) - n >= 2 * s and d[n + s] <= horizon:
            n += s
        if n:
            del d[:n]

    def append(self, p: Point, retention: float) -> bool:
        """Store a point; False when it is older than the newest stored point (ignored)."""
        if self.kind == EXP_HISTOGRAM:
            assert p.exp is not None
            return self.append_exp(p.t, p.start, p.exp, p.delta, retention)
        return self.append_values(p.t, p.start, p.values, p.delta, p.monotonic, retention)

    def append_exp(
        self, t: float, start: float, exp: ExponentialHistogram, delta: bool, retention: float
    ) -> bool:
        """`append` for an exponential histogram point."""
        pts = self.exp_points
        assert pts is not None
        if pts and t <= pts[-1][0]:
            return False
        if delta and pts:
            from metrics_adapter.sli import exponential_add

            exp = exponential_add(pts[-1][1], exp)
        elif (not pts or start != self.start) and start and t - retention < start < t:
            # new or restarted series (or the first delta): it was empty at its start
            if not pts or start > pts[-1][0]:
                pts.append((start, ExponentialHistogram(scale=exp.scale)))
        self.start = start
        pts.append((t, exp))
        while len(pts) > 2 and pts[1][0] <= t - retention:
            del pts[0]
        return True

    def append_values(
        self,
        t: float,
        start: float,
        vals: Sequence[float],
        delta: bool,
        monotonic: bool,
        retention: float,
    ) -> bool:
        """`append` for a scalar or explicit-histogram point: its numbers go straight into
        the series' array (`vals` may be an `array('d')`, copied without Python floats)."""
        d, s = self.data, self.stride
        if d and t <= d[-s]:
            return False
        kind = self.kind
        if kind == HISTOGRAM and len(vals) != s - 1:
            return False
        if delta and kind != GAUGE:
            if d:
                base = d[len(d) - s + 1 :]
                vals = tuple(a + b for a, b in zip(base, vals, strict=True))
            elif start and start < t and start > t - retention:
                # the first delta covers (start, t]: the running total was 0 at start
                d.append(start)
                d.extend([0.0] * (s - 1))
        elif (
            (kind == HISTOGRAM or (kind == SUM and monotonic))
            and start
            and start < t
            and start != self.start
        ):
            # a new or restarted cumulative series: it was 0 at its start time
            if (not d or start > d[-s]) and start > t - retention:
                d.append(start)
                d.extend([0.0] * (s - 1))
        self.start = start
        self.monotonic = monotonic
        d.append(t)
        d.extend(vals)
        # keep one point at or before the horizon so a window edge has a left neighbour
        if len(d) >= 2 * s and d[s] <= t - retention:
            self._trim(t - retention)
        return True


@dataclass(slots=True)
class Run:
    """Validated points of one metric, kind, temporality and bucket layout, column-wise
    (what the OTLP decoder emits: no object per point, the numbers in one flat array).

    Point i has attributes `attrs[i]` (built from `canonical_pair`s), times `ts[i]` / `starts[i]` and, for scalars and
    explicit histograms, the values `values[i * width : (i + 1) * width]` (width 1, or
    len(bounds) + 1 non-cumulative bucket counts); exponential histograms are in `exps`."""

    metric: str
    kind: int
    delta: bool
    monotonic: bool
    bounds: tuple[float, ...] = ()
    attrs: list[Attrs] = field(default_factory=list)
    ts: list[float] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    values: array[float] = field(default_factory=lambda: array("d"))
    exps: list[ExponentialHistogram] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ts)

    def points(self) -> list[Point]:
        """The same points as `Point` objects (tests; the store takes runs directly)."""
        w = len(self.bounds) + 1 if self.kind == HISTOGRAM else 1
        out = []
        for i, (a, t, st) in enumerate(zip(self.attrs, self.ts, self.starts, strict=True)):
            if self.kind == EXP_HISTOGRAM:
                vals: tuple[float, ...] = ()
                exp: ExponentialHistogram | None = self.exps[i]
            else:
                vals, exp = tuple(self.values[i * w : (i + 1) * w]), None
            out.append(
                Point(self.metric, self.kind, a, t, st, vals, self.delta, self.monotonic,
                      self.bounds, exp)
            )  # fmt: skip
        return out


class SeriesStore:
    """Series by metric and namespace, with an LRU cap and idle expiry (module docstring)."""

    def __init__(
        self,
        retention: float = 180.0,
        max_series: int = 200_000,
        idle_expiry: float = 600.0,
        namespace_attribute: str = names.ATTR_K8S_NAMESPACE,
        max_label_bytes: int = MAX_LABEL_BYTES,
    ) -> None:
        self.retention = retention
        self.max_series = max_series
        self.max_label_bytes = max_label_bytes
        self.label_bytes = 0
        """Characters of every stored series' attributes (each series counted whole,
        though series share their pairs: an upper bound of what they hold)."""
        self.idle_expiry = idle_expiry
        self.namespace_attribute = namespace_attribute
        self._lru: OrderedDict[Series, None] = OrderedDict()
        """Series in write order (hashed by identity: no attribute tuple hashed per point)."""
        self._by_id: dict[str, dict[int, Series]] = {}
        """metric -> id(series.attrs) -> series: the decoder hands over the same attribute
        tuple on every push, so a lookup needs no hashing of it; an entry counts only while
        `series.attrs is` the tuple looked up (the series keeps it alive, so its id is not
        reused)."""
        self._index: dict[str, dict[str, dict[tuple[str, Attrs], Series]]] = {}
        self._bounds: dict[tuple[float, ...], tuple[float, ...]] = {}
        self._lock = threading.RLock()
        self.dropped = 0
        """Series evicted because the store was full (kvspread_adapter_series_dropped_total)."""
        self.expired = 0
        self.points = 0
        self.ignored = 0
        """Points older than their series' newest point (duplicates, reordering)."""

    def __len__(self) -> int:
        return len(self._lru)

    def _namespace(self, attrs: Attrs) -> str:
        for k, v in reversed(attrs):  # point attributes come last and win
            if k == self.namespace_attribute:
                return v
        return ""

    def _find(self, metric: str, attrs: Attrs) -> Series | None:
        """The series of (metric, attrs) by value (`_index` is the one table by value)."""
        by_ns = self._index.get(metric)
        if by_ns is None:
            return None
        group = by_ns.get(self._namespace(attrs))
        return None if group is None else group.get((metric, attrs))

    def _drop(self, s: Series) -> None:
        key = (s.metric, s.attrs)
        del self._lru[s]
        self.label_bytes -= s.label_bytes
        ids = self._by_id.get(s.metric)
        if ids is not None and ids.get(id(s.attrs)) is s:
            del ids[id(s.attrs)]
        by_ns = self._index.get(s.metric)
        if by_ns is not None:
            group = by_ns.get(s.namespace)
            if group is not None:
                group.pop(key, None)
                if not group:
                    del by_ns[s.namespace]
            if not by_ns:
                del self._index[s.metric]
                self._by_id.pop(s.metric, None)

    def _series(
        self,
        metric: str,
        kind: int,
        attrs: Attrs,
        bounds: tuple[float, ...],
        canonical: bool = False,
    ) -> Series:
        """The series of (metric, attrs), created or restarted as needed (lock held);
        `canonical`: attrs are already built from `canonical_pair`s (the decoder's, which
        the series then keeps, so that `_by_id` finds it on the next push)."""
        s = self._find(metric, attrs)
        if s is not None:
            if s.kind == kind and (kind != HISTOGRAM or s.bounds == bounds):
                self._lru.move_to_end(s)
                if canonical and s.attrs is not attrs:
                    ids = self._by_id.setdefault(metric, {})
                    if ids.get(id(s.attrs)) is s:
                        del ids[id(s.attrs)]
                    s.attrs = attrs  # equal; the decoder's own tuple from now on
                    ids[id(attrs)] = s
                return s
            # the instrument changed shape: start the series afresh
            self._drop(s)
        if not canonical:
            attrs = canonical_attrs(attrs)
        key = (metric, attrs)
        bounds = self._bounds.setdefault(bounds, bounds)
        ns = self._namespace(attrs)
        s = Series(metric, kind, attrs, ns, bounds)
        self._lru[s] = None
        self.label_bytes += s.label_bytes
        self._by_id.setdefault(metric, {})[id(attrs)] = s
        self._index.setdefault(metric, {}).setdefault(ns, {})[key] = s
        while len(self._lru) > self.max_series or (
            self.label_bytes > self.max_label_bytes and len(self._lru) > 1
        ):
            self._drop(next(iter(self._lru)))
            self.dropped += 1
        return s

    def add(self, points: list[Point], now: float) -> int:
        """Store validated points (all of them, atomically w.r.t. readers); returns how many
        were stored (older-than-newest points are ignored and counted)."""
        stored = 0
        with self._lock:
            for p in points:
                s = self._series(p.metric, p.kind, p.attrs, p.bounds)
                if s.append(p, self.retention):
                    stored += 1
                s.last_seen = now
            self.points += stored
            self.ignored += len(points) - stored
        return stored

    def add_runs(self, runs: list[Run], now: float) -> int:
        """`add` for the decoder's column-wise runs (same semantics, no object per point)."""
        stored = total = 0
        retention = self.retention
        with self._lock:
            series = self._series
            to_end = self._lru.move_to_end
            for r in runs:
                metric, kind, delta, mono, bounds = r.metric, r.kind, r.delta, r.monotonic, r.bounds
                total += len(r.ts)
                if kind == EXP_HISTOGRAM:
                    for a, t, st, exp in zip(r.attrs, r.ts, r.starts, r.exps, strict=True):
                        s = series(metric, kind, a, bounds, True)
                        stored += s.append_exp(t, st, exp, delta, retention)
                        s.last_seen = now
                    continue
                w = len(bounds) + 1 if kind == HISTOGRAM else 1
                stride = w + 1
                vals = r.values
                i = 0
                get = self._by_id.setdefault(metric, {}).get
                for a, t, st in zip(r.attrs, r.ts, r.starts, strict=True):
                    got = get(id(a))
                    if (
                        got is None
                        or got.attrs is not a
                        or got.kind != kind
                        or (got.bounds is not bounds and got.bounds != bounds)
                    ):
                        s = series(metric, kind, a, bounds, True)
                    else:
                        s = got
                        to_end(s)
                    s.last_seen = now
                    d = s.data
                    if not delta and d and t > d[-stride] and st == s.start:
                        # the common case, `Series.append_values` inlined: the next
                        # cumulative point of a known series
                        s.monotonic = mono
                        d.append(t)
                        d.extend(vals[i : i + w])
                        if len(d) >= 2 * stride and d[stride] <= t - retention:
                            s._trim(t - retention)
                        stored += 1
                    else:
                        stored += s.append_values(t, st, vals[i : i + w], delta, mono, retention)
                    i += w
            self.points += stored
            self.ignored += total - stored
        return stored

    def expire(self, now: float) -> int:
        """Remove series not written for idle_expiry seconds; returns how many."""
        n = 0
        with self._lock:
            lru = self._lru
            while lru:
                s = next(iter(lru))
                if s.last_seen > now - self.idle_expiry:
                    break
                self._drop(s)
                n += 1
            self.expired += n
        return n

    def select(self, metric: str, namespace: str | None) -> list[Series]:
        """Series of `metric`, only those whose namespace attribute is `namespace` unless None."""
        with self._lock:
            by_ns = self._index.get(metric)
            if not by_ns:
                return []
            if namespace is None:
                return [s for group in by_ns.values() for s in group.values()]
            return list(by_ns.get(namespace, {}).values())

    def locked(self) -> threading.RLock:
        """The store's (re-entrant) lock: hold it while reading series points, so that a
        concurrent push cannot trim or extend them mid-read."""
        return self._lock

    def metrics(self) -> list[str]:
        with self._lock:
            return sorted(self._index)

    def __iter__(self) -> Iterator[Series]:
        with self._lock:
            return iter(list(self._lru))
