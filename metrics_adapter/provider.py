"""The seam between the API shell and the sources: `ExternalMetricsProvider`.

`apiserver.py` talks only to this protocol. `RuleProvider` is the real implementation: it
looks a metric up among the configured rules and computes it from the OTLP series store
(with the pure math of `sli.py`) or from a PromQL source.

Contract (as in custom-metrics-apiserver's ExternalMetricsProvider):
- `list_metrics()` never raises; it names every metric that may be read.
- `get_external_metric(namespace, name, selector)` returns the values (possibly none: no
  fresh data is an empty list, so the HPA sees a missing metric, never an old value), or
  raises an `errors.AdapterError` (MetricNotFound for an unknown name,
  SourceUnavailable when a backend is down).
Thread-safety: both methods may be called from several threads at once.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from metrics_adapter import sli
from metrics_adapter.errors import MetricNotFound, SourceUnavailable
from metrics_adapter.rules import Rule
from metrics_adapter.selectors import Selector
from metrics_adapter.sources.store import EXP_HISTOGRAM, GAUGE, HISTOGRAM, SUM, Series, SeriesStore

__all__ = ["MetricValue", "ExternalMetricsProvider", "RuleProvider", "PromSource"]

log = logging.getLogger("kvspread.adapter.provider")


@dataclass(frozen=True)
class MetricValue:
    """One served value: what becomes an ExternalMetricValue item."""

    name: str
    value: float
    timestamp: float
    window: float | None = None
    labels: dict[str, str] = field(default_factory=dict)


class ExternalMetricsProvider(Protocol):
    """What the API shell needs (module docstring has the contract)."""

    def list_metrics(self) -> list[str]: ...

    def get_external_metric(
        self, namespace: str, name: str, selector: Selector
    ) -> list[MetricValue]: ...


class PromSource(Protocol):
    """A PromQL-backed rule evaluator (sources/promql.py)."""

    def evaluate(self, rule: Rule, namespace: str, selector: Selector) -> list[MetricValue]: ...


def _common_labels(label_sets: Iterable[dict[str, str]]) -> dict[str, str]:
    it = iter(label_sets)
    first = next(it, None)
    if first is None:
        return {}
    common = dict(first)
    for ls in it:
        for k in list(common):
            if ls.get(k) != common[k]:
                del common[k]
    return common


class RuleProvider:
    """Serve the configured rules from the OTLP store and an optional PromQL source.

    Parameters:
        rules: the configured rules (names unique).
        store: the OTLP series store.
        clock: () -> wall seconds.
        prom: evaluator for `source: promql` rules (None: such rules answer 503).
    """

    def __init__(
        self,
        rules: Sequence[Rule],
        store: SeriesStore,
        clock: Callable[[], float],
        prom: PromSource | None = None,
    ) -> None:
        self.rules = {r.name: r for r in rules}
        self.store = store
        self.clock = clock
        self.prom = prom
        self.stale_reads = 0
        """Reads that found series, all of them too old to serve."""

    def list_metrics(self) -> list[str]:
        return sorted(self.rules)

    def is_blocking(self, name: str) -> bool:
        """True when reading `name` may block on I/O (PromQL): the shell then uses a thread."""
        rule = self.rules.get(name)
        return rule is not None and rule.source == "promql"

    def get_external_metric(
        self, namespace: str, name: str, selector: Selector
    ) -> list[MetricValue]:
        rule = self.rules.get(name)
        if rule is None:
            raise MetricNotFound(name, "no rule defines it")
        if rule.source == "promql":
            if self.prom is None:
                raise SourceUnavailable(
                    f"metric {name!r} needs Prometheus, but no URL is configured"
                )
            return self.prom.evaluate(rule, namespace, selector)
        assert rule.metric is not None
        with self.store.locked():
            return self._otlp_values(rule, namespace, selector)

    def _otlp_values(self, rule: Rule, namespace: str, selector: Selector) -> list[MetricValue]:
        assert rule.metric is not None
        name = rule.name
        now = self.clock()
        series = self._select(rule, rule.metric, namespace, selector, rule.match, now)
        if rule.aggregation == "ratio":
            assert rule.numerator is not None
            num_metric = rule.numerator.metric or rule.metric
            num_match = rule.match + rule.numerator.match
            num_series = self._select(rule, num_metric, namespace, selector, num_match, now)
            value = self._ratio(rule, num_series, series, now)
        else:
            value = self._compute(rule, series, now)
        if value is None:
            return []
        v, ts, used = value
        if not math.isfinite(v):
            return []
        labels = _common_labels(s.labels(rule.labels) for s in used)
        return [MetricValue(name, v, ts, rule.window, labels)]

    # --- selection --------------------------------------------------------------------

    def _select(
        self,
        rule: Rule,
        metric: str,
        namespace: str,
        selector: Selector,
        match: tuple[tuple[str, str], ...],
        now: float,
    ) -> list[Series]:
        ns_attr = rule.namespace_attribute()
        if rule.cluster_wide:
            candidates = self.store.select(metric, None)
        elif ns_attr is None:
            return []
        elif ns_attr == self.store.namespace_attribute:
            candidates = self.store.select(metric, namespace)
        else:
            candidates = [
                s for s in self.store.select(metric, None) if s.attr_map().get(ns_attr) == namespace
            ]
        out: list[Series] = []
        stale = 0
        horizon = now - rule.staleness
        for s in candidates:
            if match:
                attrs = s.attr_map()
                if not all(rule.pattern(rx).fullmatch(attrs.get(a, "")) for a, rx in match):
                    continue
            if selector.requirements and not selector.matches(s.labels(rule.labels)):
                continue
            if not len(s) or s.last_time() < horizon:
                stale += 1
                continue
            out.append(s)
        if stale and not out:
            self.stale_reads += 1
        return out

    # --- computation ------------------------------------------------------------------

    def _window(self, rule: Rule, series: Sequence[Series], now: float) -> tuple[float, float]:
        newest = max((s.last_time() for s in series), default=now)
        return now - rule.window, max(now, newest)

    def _hist_deltas(
        self, rule: Rule, series: Sequence[Series], start: float, end: float
    ) -> tuple[
        list[tuple[sli.ExplicitHistogram, float, Series]],
        list[tuple[sli.ExponentialHistogram, float, Series]],
    ]:
        explicit: list[tuple[sli.ExplicitHistogram, float, Series]] = []
        expo: list[tuple[sli.ExponentialHistogram, float, Series]] = []
        for s in series:
            if s.kind == HISTOGRAM:
                pts = [(t, sli.ExplicitHistogram(s.bounds, c)) for t, c in s.histograms()]
                got = sli.histogram_increase(pts, start, end, rule.extrapolation)  # type: ignore[arg-type]
                if got is not None:
                    explicit.append((got[0], got[1], s))
            elif s.kind == EXP_HISTOGRAM and s.exp_points is not None:
                got2 = sli.exponential_increase(s.exp_points, start, end)
                if got2 is not None:
                    expo.append((got2[0], got2[1], s))
        return explicit, expo

    def _rate_of(
        self, rule: Rule, series: Sequence[Series], now: float
    ) -> tuple[float, list[Series]] | None:
        start, end = self._window(rule, series, now)
        total, used = 0.0, []
        explicit, expo = self._hist_deltas(rule, series, start, end)
        for h, secs, s in explicit:
            total += h.count / secs
            used.append(s)
        for e, secs, s in expo:
            total += e.count / secs
            used.append(s)
        for s in series:
            if s.kind == SUM:
                r = sli.rate(s.scalars(), start, end, rule.extrapolation)  # type: ignore[arg-type]
                if r is not None:
                    total += r
                    used.append(s)
        return (total, used) if used else None

    def _ratio(
        self, rule: Rule, num: Sequence[Series], den: Sequence[Series], now: float
    ) -> tuple[float, float, list[Series]] | None:
        d = self._rate_of(rule, den, now)
        if d is None:
            return None
        n = self._rate_of(rule, num, now) if num else None
        n_val = n[0] if n is not None else 0.0
        r = sli.ratio(n_val, d[0])
        if r is None:
            return None
        return r, max(s.last_time() for s in d[1]), d[1]

    def _compute(
        self, rule: Rule, series: Sequence[Series], now: float
    ) -> tuple[float, float, list[Series]] | None:
        if not series:
            return None
        agg = rule.aggregation
        if agg == "last":
            vals = [(s.scalars()[-1][1], s) for s in series if s.kind in (GAUGE, SUM) and len(s)]
            if not vals:
                return None
            nums = [v for v, _ in vals]
            used = [s for _, s in vals]
            if rule.combine == "sum":
                v = math.fsum(nums)
            elif rule.combine == "mean":
                v = math.fsum(nums) / len(nums)
            elif rule.combine == "max":
                v = max(nums)
            else:
                v = min(nums)
            return v, max(s.last_time() for s in used), used
        if agg == "rate":
            got = self._rate_of(rule, series, now)
            if got is None:
                return None
            return got[0], max(s.last_time() for s in got[1]), got[1]
        start, end = self._window(rule, series, now)
        explicit, expo = self._hist_deltas(rule, series, start, end)
        if agg == "good-rate":
            assert rule.threshold is not None
            total, used = 0.0, []
            for h, secs, s in explicit:
                g = sli.good_rate(h, secs, rule.threshold)
                if g is not None:
                    total += g
                    used.append(s)
            if not used:
                return None
            return total, max(s.last_time() for s in used), used
        # quantile: merge the windowed histograms of the whole population first
        assert rule.quantile is not None
        if explicit:
            by_bounds: dict[tuple[float, ...], list[tuple[sli.ExplicitHistogram, Series]]] = {}
            for h, _, s in explicit:
                by_bounds.setdefault(h.bounds, []).append((h, s))
            bounds, group = max(by_bounds.items(), key=lambda kv: sum(h.count for h, _ in kv[1]))
            counts = [0.0] * (len(bounds) + 1)
            for h, _ in group:
                for i, c in enumerate(h.counts):
                    counts[i] += c
            merged = sli.ExplicitHistogram(bounds, tuple(counts))
            if merged.count == 0:
                return None
            used = [s for _, s in group]
            return (
                sli.histogram_quantile(rule.quantile, merged),
                max(s.last_time() for s in used),
                used,
            )
        if expo:
            acc = expo[0][0]
            for e, _, _ in expo[1:]:
                acc = sli.exponential_add(acc, e)
            if acc.count == 0:
                return None
            used = [s for _, _, s in expo]
            return (
                sli.exponential_quantile(rule.quantile, acc),
                max(s.last_time() for s in used),
                used,
            )
        return None
