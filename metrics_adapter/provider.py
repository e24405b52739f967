"""The seam between the API shells and the sources: `ExternalMetricsProvider`.

`apiserver.py` (REST) and the KEDA scaler talk only to this protocol. `RuleProvider` is the
real implementation, a small router: it looks the metric up among the configured rules
and hands the rule to the `Source` (sources/base.py) named by its `source:` key.

Contract (as in custom-metrics-apiserver's ExternalMetricsProvider):
- `list_metrics()` never raises; it names every metric that may be read.
- `read(namespace, name, selector)` returns the values or raises an `errors.AdapterError`:
  MetricNotFound for an unknown name, NoFreshData when series match but none can give a
  value now (counted in `stale_reads`), HistogramTooCoarse when a quantile's bucket cannot
  bound it (counted in `refused_reads`), SourceUnavailable when a backend is down.
- `get_external_metric(...)` is `read` for the REST API, where no fresh data is an empty
  list (the HPA sees a missing metric, never an old value).
- `is_blocking(name)` is True when reading `name` may wait on I/O (the shells then read in
  a worker thread).
Thread-safety: every method may be called from several threads at once.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from metrics_adapter.errors import (
    AdapterError,
    HistogramTooCoarse,
    MetricNotFound,
    NoFreshData,
    SourceUnavailable,
    ValueOutOfRange,
)
from metrics_adapter.guard import TERM_LABEL as GUARD_LABEL
from metrics_adapter.guard import GuardMemory, guarded
from metrics_adapter.rules import OFF, Pressure, Rule
from metrics_adapter.selectors import Selector
from metrics_adapter.sources.base import Source
from metrics_adapter.step import Step, step_value
from metrics_adapter.trend import TERM_LABEL, predicted_rate, trend_term
from metrics_adapter.values import MetricValue

__all__ = ["ExternalMetricsProvider", "RuleProvider"]


def _shared_class(label: str, read: Sequence[tuple[str, list[MetricValue]]]) -> str | None:
    """The value of `label` that every term value carrying it shares (None: no value
    carries it, or they disagree, as when one service's pods are labelled differently)."""
    seen = {v.labels[label] for _, values in read for v in values if label in v.labels}
    return seen.pop() if len(seen) == 1 else None


class ExternalMetricsProvider(Protocol):
    """What the API shells need (module docstring has the contract)."""

    def list_metrics(self) -> list[str]: ...

    def is_blocking(self, name: str) -> bool: ...

    def read(self, namespace: str, name: str, selector: Selector) -> list[MetricValue]: ...

    def get_external_metric(
        self, namespace: str, name: str, selector: Selector
    ) -> list[MetricValue]: ...


def _out_of_range(name: str, value: float) -> ValueOutOfRange:
    return ValueOutOfRange(
        f"metric {name!r}: the value is {value} (past the float range), which no quantity"
        " can hold; check the pushed values and, for a pressure, that no term's target is"
        " so small that value / target overflows"
    )


class RuleProvider:
    """Route each configured rule to its source.

    Parameters:
        rules: the configured rules (names unique).
        sources: source name (a rule's `source:`, "otlp" or "promql") -> `Source`; a rule
            whose source is missing answers 503 naming what to configure.
    """

    def __init__(self, rules: Sequence[Rule], sources: Mapping[str, Source]) -> None:
        self.rules = {r.name: r for r in rules}
        self.sources = dict(sources)
        self._lock = threading.Lock()
        self.stale_reads: dict[str, int] = {}
        """metric -> reads that found no fresh data (kvspread_adapter_stale_reads_total)."""
        self.refused_reads: dict[tuple[str, str], int] = {}
        """(metric, reason) -> quantiles refused (kvspread_adapter_refused_reads_total)."""
        self.guards: dict[str, GuardMemory] = {
            r.name: GuardMemory() for r in rules if r.pressure is not None and r.pressure.guard
        }
        """pressure rule -> its scale-down guard's violations (metrics_adapter.guard)."""
        self.guard_holds: dict[str, int] = {}
        """pressure rule -> reads the guard raised (kvspread_adapter_guard_holds_total)."""
        self.guard_violations: dict[str, int] = {}
        """pressure rule -> reads over 1 remembered (kvspread_adapter_guard_violations_total)."""

    def list_metrics(self) -> list[str]:
        return sorted(self.rules)

    def is_blocking(self, name: str) -> bool:
        rule = self.rules.get(name)
        if rule is not None and rule.pressure is not None:
            return any(self.is_blocking(term) for term, _ in rule.pressure.terms)
        source = self.sources.get(rule.source) if rule is not None else None
        return source is not None and source.blocking

    def ready(self) -> bool:
        return all(s.ready() for s in self.sources.values())

    def read(self, namespace: str, name: str, selector: Selector) -> list[MetricValue]:
        rule = self.rules.get(name)
        if rule is None:
            raise MetricNotFound(name, "no rule defines it")
        source = self.sources.get(rule.source)
        if source is None and rule.pressure is None:
            what = "a Prometheus URL (--prometheus-url)" if rule.source == "promql" else "it"
            raise SourceUnavailable(
                f"metric {name!r} needs the {rule.source} source, but {what} is not configured"
            )
        try:
            if rule.pressure is not None:
                values = self._pressure(rule, rule.pressure, namespace, selector)
            else:
                assert source is not None
                values = source.evaluate(rule, namespace, selector)
        except OverflowError:
            raise _out_of_range(name, math.inf) from None
        except NoFreshData:
            self._count(self.stale_reads, name)
            raise
        except HistogramTooCoarse as exc:
            key = (name, exc.refusal)
            self._count(self.refused_reads, key)
            raise
        for v in values:
            if not math.isfinite(v.value):
                raise _out_of_range(name, v.value)
        return values

    def _pressure(
        self, rule: Rule, pressure: Pressure, namespace: str, selector: Selector
    ) -> list[MetricValue]:
        """max(term / target) over the terms with a value (rules.py, `slo-pressure`).

        A refused term refuses the pressure where its bucket straddles the term's target
        (serving the other terms alone would hide a latency that may be over it). Where the
        bucket lies wholly at or over the target, its lower bound / target, the least the
        term can be, stands for it (a p95 TTFT in the +Inf bucket past 10 s is at least 5
        times a 2 s target: the HPA must scale up, not hold); where it lies wholly at or
        under, its upper bound / target, the most it can be (a TPOT p95 in the collector's
        first bucket, under 10 ms, is at most 0.2 of 50 ms: the HPA may scale down on the
        other terms, never past what that bound allows). A term whose target is `off` for
        the service's class is left out; a `holdOnly` term counts at most 1 (it can hold the
        replicas serving now, not add one). `metricLabels` are the labels every term's
        value shares, plus `term`: the rule that set the pressure.
        """
        wanted = selector.equalities()
        service = wanted.get(pressure.service_label)
        # the class label picks the targets, not the series: the engine gauges carry none
        selector = selector.without(pressure.class_label)
        read: list[tuple[str, list[MetricValue]]] = []
        refused: list[tuple[str, HistogramTooCoarse]] = []
        matched = False
        for term, _ in pressure.terms:
            try:
                values = self.read(namespace, term, selector)
            except NoFreshData:
                matched = True
                continue
            except HistogramTooCoarse as exc:
                refused.append((term, exc))
                continue
            if not values:
                continue
            matched = True
            read.append((term, values))
        floors = [(term, [r.floor]) for term, r in refused if r.floor is not None]
        seen = wanted.get(pressure.class_label) or _shared_class(
            pressure.class_label, [*read, *floors]
        )
        cls = pressure.class_for(service, seen)
        targets = pressure.targets_of(service, cls)
        for term, too_coarse in refused:
            floor, target = too_coarse.floor, targets[term]
            if target == OFF:  # the term does not apply to this class or service
                continue
            if floor is not None and floor.value >= target:
                read.append((term, [floor]))  # over target whatever it is: its least
            elif floor is not None and too_coarse.ceiling <= target:
                read.append((term, [replace(floor, value=too_coarse.ceiling)]))  # its most
            else:  # the bucket straddles the target: which side the quantile is on is unknown
                raise HistogramTooCoarse(
                    f"metric {rule.name!r}: its term {term!r} is refused: {too_coarse.message}",
                    too_coarse.refusal,
                )
        best: tuple[float, str] | None = None
        used: list[MetricValue] = []
        for term, values in read:
            if targets[term] == OFF:
                continue
            ratio = max(v.value for v in values) / targets[term]
            if pressure.step is not None and term in pressure.step.terms:
                stepped = self._step(pressure.step, term, ratio, namespace, selector)
                if stepped is None:
                    continue
                ratio = stepped
            if term in pressure.hold_only:
                ratio = min(ratio, 1.0)  # holds the replicas serving now, never adds one
            used.extend(values)
            if best is None or ratio > best[0]:
                best = (ratio, term)
        trend = self._trend(pressure, namespace, selector, service, used)
        if trend is not None and (best is None or trend > best[0]):
            best = (trend, TERM_LABEL)
        if best is None:
            if not matched:
                return []
            raise NoFreshData(
                f"metric {rule.name!r}: none of its terms ({', '.join(t for t, _ in pressure.terms)}) "
                "has a fresh value"
            )
        held = self._guard(rule, pressure, namespace, selector, best[0], used)
        if held is not None:
            best = (held, GUARD_LABEL)
        labels = dict(used[0].labels)
        for v in used[1:]:
            labels = {k: x for k, x in labels.items() if v.labels.get(k) == x}
        labels["term"] = best[1]
        if cls is not None:
            labels["class"] = cls
        windows = [v.window for v in used if v.window is not None]
        return [
            MetricValue(
                rule.name,
                best[0],
                max(v.timestamp for v in used),
                max(windows) if windows else rule.window,
                labels,
            )
        ]

    def _count(self, counts: dict[Any, int], key: Any) -> None:
        """One more in a self-metric counter (several HTTP threads read at once)."""
        with self._lock:
            counts[key] = counts.get(key, 0) + 1

    def _largest(
        self,
        namespace: str,
        name: str,
        selector: Selector,
        tolerate: type[AdapterError] = NoFreshData,
    ) -> tuple[float, list[MetricValue]] | None:
        """The largest value a helper rule (a replica count, a request rate) serves for
        `selector`, with the values read; None where it serves none or raises `tolerate`."""
        try:
            values = self.read(namespace, name, selector)
        except tolerate:
            return None
        if not values:
            return None
        return max(v.value for v in values), values

    def _step(
        self, step: Step, term: str, ratio: float, namespace: str, selector: Selector
    ) -> float | None:
        """A latency term's step (metrics_adapter.step); the replica count is read only
        when the term is over its target, and none fresh counts as one replica."""
        replicas = None
        if ratio > 1.0:
            got = self._largest(namespace, step.replicas, selector)
            replicas = got[0] if got is not None else None
        return step_value(ratio, replicas, step, term)

    def _guard(
        self,
        rule: Rule,
        pressure: Pressure,
        namespace: str,
        selector: Selector,
        value: float,
        used: list[MetricValue],
    ) -> float | None:
        """The scale-down guard (metrics_adapter.guard): records a pressure over 1 and
        returns the value that holds the replicas it refuses to let go, None where it holds
        none (off, the pressure's own proposal allowed, no replica count or rate: the
        pressure is then served as it is, as without a guard)."""
        g = pressure.guard
        memory = self.guards.get(rule.name)
        if g is None or memory is None:
            return None
        got: list[float] = []
        for name in (g.replicas, g.rate):
            # stale, or its source down: the terms decide alone
            largest = self._largest(namespace, name, selector, tolerate=AdapterError)
            if largest is None:
                return None
            got.append(largest[0])
        replicas, rate = got
        now = max(v.timestamp for v in used)
        key = f"{namespace}/{','.join(sorted(str(r) for r in selector.requirements))}"
        # the pressure is a percentile over its window: a violation is the fewest serving in it
        lag = max((v.window for v in used if v.window is not None), default=rule.window)
        least = memory.least(key, now, replicas, lag)
        if value > 1.0:
            if memory.record(key, now, least, rate):
                self._count(self.guard_violations, rule.name)
            return None
        held = guarded(value, replicas, rate, memory.violations(key, now, g.window_s), g.fraction)
        if held is not None:
            self._count(self.guard_holds, rule.name)
        return held

    def _trend(
        self,
        pressure: Pressure,
        namespace: str,
        selector: Selector,
        service: str | None,
        used: list[MetricValue],
    ) -> float | None:
        """The predictive term (metrics_adapter.trend), None when off or left out: an input
        without a fresh value, a rate that does not rise, no replica serving."""
        t = pressure.trend
        if t is None:
            return None
        got: list[float] = []
        inputs: list[MetricValue] = []
        for name in (t.short, t.long, t.replicas):
            largest = self._largest(namespace, name, selector)
            if largest is None:
                return None
            got.append(largest[0])
            inputs.extend(largest[1])
        short, long, replicas = got
        ahead = predicted_rate(
            short, long, self.rules[t.short].window, self.rules[t.long].window, t
        )
        term = trend_term(ahead, replicas, pressure.capacity_for(service))
        if term is not None:
            used.extend(inputs)
        return term

    def get_external_metric(
        self, namespace: str, name: str, selector: Selector
    ) -> list[MetricValue]:
        try:
            return self.read(namespace, name, selector)
        except NoFreshData:
            return []
