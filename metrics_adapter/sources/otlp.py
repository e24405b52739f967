"""OTLP source: a rule's value computed from the series the embedded receiver stored.

A read selects every series of the rule's metric in the request's namespace (through the
attribute the rule maps to `namespace`, unless clusterWide) whose mapped labels match the
selector and whose attributes pass the rule's `match`; the SLI is computed over that whole
population with the pure math of `sli.py` (histograms merged before a quantile, rates
summed), and its `metricLabels` are the labels every used series shares.

Reading holds the store's lock so that a concurrent push cannot trim a series mid-read.
This module knows neither HTTP nor protobuf: the receiver (`metrics_adapter.receiver`)
decodes pushes (`sources.otlp_decode`) into the store.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Final

from metrics_adapter import sli
from metrics_adapter.errors import HistogramTooCoarse, NoFreshData, WrongKind
from metrics_adapter.rules import Rule
from metrics_adapter.selectors import Selector
from metrics_adapter.sources.refusal import common_labels, describe, not_a_bound, too_coarse
from metrics_adapter.sources.store import EXP_HISTOGRAM, GAUGE, HISTOGRAM, SUM, Series, SeriesStore
from metrics_adapter.values import MetricValue

__all__ = ["OtlpSource"]

_Computed = tuple[float, float, list[Series]]
"""(value, timestamp of the newest used point, the series used)."""


def _merged_name(used: Sequence[Series]) -> str:
    """`metric{attributes every used series shares}`: how a refusal names what it merged."""
    return used[0].metric + describe(common_labels(s.attr_map() for s in used))


def _too_coarse(
    rule: Rule,
    used: Sequence[Series],
    bounds: tuple[float, ...],
    value: float,
    reason: str,
    lower: float,
    upper: float,
) -> HistogramTooCoarse:
    """The refusal of a quantile whose bucket cannot bound it (docs/adapter.md)."""
    series = _merged_name(used)
    labels = common_labels(s.labels(rule.labels) for s in used)
    newest = max(s.last_time() for s in used)
    return too_coarse(rule, series, len(used), bounds, value, reason, lower, upper, labels, newest)


class OtlpSource:
    """Evaluate `source: otlp` rules against a `SeriesStore`.

    Parameters:
        store: the OTLP series store.
        clock: () -> wall seconds (the same clock the receiver stamps pushes with).
    """

    blocking = False

    def __init__(self, store: SeriesStore, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock

    def ready(self) -> bool:
        return True

    def evaluate(self, rule: Rule, namespace: str, selector: Selector) -> list[MetricValue]:
        assert rule.metric is not None
        with self.store.locked():
            return self._values(rule, namespace, selector)

    def _values(self, rule: Rule, namespace: str, selector: Selector) -> list[MetricValue]:
        assert rule.metric is not None
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
        if value is None or not math.isfinite(value[0]):
            if not series:
                return []  # nothing matches: an empty answer, not missing data
            _check_kinds(rule, series)
            what = "observations" if rule.aggregation == "quantile" else "points"
            raise NoFreshData(
                f"metric {rule.name!r}: the {len(series)} matching series of {rule.metric!r} "
                f"have too few {what} inside the {rule.window:g} s window to give a value "
                "(a rate needs two points, a quantile one observation)"
            )
        v, ts, used = value
        labels = common_labels(s.labels(rule.labels) for s in used)
        return [MetricValue(rule.name, v, ts, rule.window, labels)]

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
        store = self.store
        if rule.cluster_wide:
            candidates = store.select(metric, None)
        elif ns_attr is None:
            return []
        elif ns_attr == store.namespace_attribute:
            candidates = store.select(metric, namespace)
        else:
            candidates = [
                s for s in store.select(metric, None) if s.attr_map().get(ns_attr) == namespace
            ]
        out: list[Series] = []
        stale: list[Series] = []
        horizon = now - rule.staleness
        for s in candidates:
            if match:
                attrs = s.attr_map()
                if not all(rule.pattern(rx).fullmatch(attrs.get(a, "")) for a, rx in match):
                    continue
            if selector.requirements and not selector.matches(s.labels(rule.labels)):
                continue
            if not len(s) or s.last_time() < horizon:
                stale.append(s)
                continue
            out.append(s)
        if stale and not out:
            newest = max(s.last_time() for s in stale)
            raise NoFreshData(
                f"metric {rule.name!r}: the newest point of the {len(stale)} matching "
                f"series of {metric!r} is {now - newest:.0f} s old, over the "
                f"{rule.staleness:g} s staleness limit"
            )
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
    ) -> _Computed | None:
        d = self._rate_of(rule, den, now)
        if d is None:
            return None
        n = self._rate_of(rule, num, now) if num else None
        n_val = n[0] if n is not None else 0.0
        r = sli.ratio(n_val, d[0])
        if r is None:
            return None
        return r, max(s.last_time() for s in d[1]), d[1]

    def _compute(self, rule: Rule, series: Sequence[Series], now: float) -> _Computed | None:
        if not series:
            return None
        agg = rule.aggregation
        if agg == "last":
            return self._last(rule, series)
        if agg == "rate":
            got = self._rate_of(rule, series, now)
            if got is None:
                return None
            return got[0], max(s.last_time() for s in got[1]), got[1]
        start, end = self._window(rule, series, now)
        explicit, expo = self._hist_deltas(rule, series, start, end)
        if agg == "over-ratio":
            return self._over_ratio(rule, explicit, expo)
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
        return self._quantile(rule, explicit, expo)

    def _over_ratio(
        self,
        rule: Rule,
        explicit: list[tuple[sli.ExplicitHistogram, float, Series]],
        expo: list[tuple[sli.ExponentialHistogram, float, Series]],
    ) -> _Computed | None:
        """The share of the whole population's observations above the rule's threshold,
        which must be a bucket bound: a share interpolated inside a bucket could be any
        part of it, so the read is refused (reason `threshold_not_a_bound`), as is an
        exponential histogram's (its bounds are powers of its base, not the threshold)."""
        assert rule.threshold is not None
        if explicit:
            merged, used = sli.merge_explicit([(h, s) for h, _, s in explicit])
            if not sli.is_bound(rule.threshold, merged):
                raise not_a_bound(rule, _merged_name(used), len(used), merged.bounds)
            share = sli.share_above(rule.threshold, merged)
            if share is None:
                return None
            return share, max(s.last_time() for s in used), used
        if expo:
            used = [s for _, _, s in expo]
            raise not_a_bound(rule, _merged_name(used), len(used), None)
        return None

    def _last(self, rule: Rule, series: Sequence[Series]) -> _Computed | None:
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
        elif rule.combine == "count":  # series with a value: e.g. the engine pods reporting
            v = float(len(nums))
        else:
            v = min(nums)
        return v, max(s.last_time() for s in used), used

    def _quantile(
        self,
        rule: Rule,
        explicit: list[tuple[sli.ExplicitHistogram, float, Series]],
        expo: list[tuple[sli.ExponentialHistogram, float, Series]],
    ) -> _Computed | None:
        """Merge the windowed histograms of the whole population, then take the quantile."""
        assert rule.quantile is not None
        if explicit:
            merged, used = sli.merge_explicit([(h, s) for h, _, s in explicit])
            if merged.count == 0:
                return None
            value = sli.histogram_quantile(rule.quantile, merged)
            refusal = sli.quantile_refusal(
                rule.quantile, merged, value, rule.max_relative_bucket_width
            )
            if refusal is not None:
                raise _too_coarse(rule, used, merged.bounds, value, *refusal)
            return value, max(s.last_time() for s in used), used
        if expo:
            acc = expo[0][0]
            for e, _, _ in expo[1:]:
                acc = sli.exponential_add(acc, e)
            if acc.count == 0:
                return None
            used = [s for _, _, s in expo]
            value = sli.exponential_quantile(rule.quantile, acc)
            return value, max(s.last_time() for s in used), used
        return None


_HISTOGRAMS: Final = frozenset({HISTOGRAM, EXP_HISTOGRAM})
_KINDS: Final = {
    "quantile": _HISTOGRAMS,
    "good-rate": frozenset({HISTOGRAM}),
    "over-ratio": _HISTOGRAMS,
    "rate": _HISTOGRAMS | {SUM},
    "ratio": _HISTOGRAMS | {SUM},
    "last": frozenset({GAUGE, SUM}),
}
"""The point kinds each aggregation reads; a series of another kind gives it nothing."""
_KIND_WORDS: Final = {HISTOGRAM: "histogram", EXP_HISTOGRAM: "exponential histogram",
                      GAUGE: "gauge", SUM: "sum"}  # fmt: skip


def _check_kinds(rule: Rule, series: Sequence[Series]) -> None:
    """WrongKind when none of the matching series is of a kind `rule`'s aggregation reads
    (a `quantile` rule on a gauge): that is the rules file's mistake, which waiting for
    fresh data would never mend, so it is not reported as no fresh data."""
    wanted = _KINDS.get(rule.aggregation)
    if wanted is None or any(s.kind in wanted for s in series):
        return
    have = sorted({_KIND_WORDS.get(s.kind, str(s.kind)) for s in series})
    want = sorted(_KIND_WORDS[k] for k in wanted)
    raise WrongKind(
        f"metric {rule.name!r}: aggregation {rule.aggregation!r} reads {' or '.join(want)}"
        f" points, but the {len(series)} matching series of {rule.metric!r} are"
        f" {' and '.join(have)}: fix the rule's aggregation or metric"
    )
