"""PromQL source: a rule's value from an instant query against the Prometheus HTTP API.

The rule's `query` may contain `<<.LabelMatchers>>` (as in prometheus-adapter); it is
replaced by matchers built from the request: the namespace (through the label the rule maps
to `namespace`) and each selector requirement (`=` -> `l="v"`, `!=` -> `l!="v"`, `in` ->
`l=~"a|b"`, `notin` -> `l!~"a|b"`, `key` -> `l!=""`, `!key` -> `l=""`; `<`/`>` are applied to
the results, as are requirements on labels the rule does not map; a requirement sent as a
matcher is not checked again, since an aggregating query drops its label). The rule's
`labels` map Prometheus label names to selector labels. Each
sample of the result becomes one value (the query decides how to aggregate).

A rule with `aggregation: quantile` instead returns bucket rates, one sample per `le`
(`sum by (le) (rate(x_bucket{<<.LabelMatchers>>}[1m]))`, optionally by more labels such
as `llm_qos`). The source merges them as the OTLP source merges histograms (each label set
but `le` is one histogram; those with the most common bounds are added), takes the
quantile as Prometheus' `histogram_quantile` does (`sli.bucket_quantile`) and refuses it
where the bucket cannot bound it (docs/adapter.md, "Coarse histograms"), which a
`histogram_quantile` query cannot do. The value's `metricLabels` are the mapped labels
every merged histogram shares, so a query by `(le, llm_qos)` carries the SLO class where
all of a service's pods have one.

The client is a narrow protocol, `PromClient.query(promql, timeout)`, so that tests can use
`FakePromClient`; `HttpPromClient` talks to a real server with httpx. Answers are cached
for `cache_ttl` seconds per final query string, and a down or slow Prometheus becomes a
`SourceUnavailable` (503) whose message names the URL and the cause.

Bounds: `timeout` is the whole query's deadline (connect to last byte, so a server that
drips its answer cannot hold a read open), an answer is read up to `MAX_ANSWER_BYTES` and
`MAX_ANSWER_SAMPLES` samples (past either the read fails with the query named and the fix,
aggregate in the query), and the cache holds at most `CACHE_MAX_SAMPLES` samples in all.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from metrics_adapter import sli
from metrics_adapter.errors import AdapterError, NoFreshData, SourceUnavailable
from metrics_adapter.rules import NAMESPACE_LABEL, Rule
from metrics_adapter.selectors import Requirement, Selector
from metrics_adapter.sources.refusal import common_labels, describe, too_coarse
from metrics_adapter.values import MetricValue

__all__ = [
    "PromClient",
    "PromSample",
    "HttpPromClient",
    "FakePromClient",
    "PromQLSource",
    "build_matchers",
    "parse_result",
    "MAX_ANSWER_BYTES",
    "MAX_ANSWER_SAMPLES",
    "CACHE_MAX_SAMPLES",
]

LABEL_MATCHERS = "<<.LabelMatchers>>"
MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""The largest Prometheus answer read (bytes of JSON); about 60,000 samples of 5 labels."""
MAX_ANSWER_SAMPLES = 20_000
"""The most samples one answer may have: an HPA reads one value per selector, so a query
that returns more aggregates too little (a quantile rule's buckets: 20 `le` x 1,000 groups)."""
CACHE_MAX_SAMPLES = 100_000
"""Samples the answer cache holds in all (about 70 MB at most); past it the cache is
emptied before the next answer is stored."""
_PROM_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


@dataclass(frozen=True)
class PromSample:
    labels: dict[str, str]
    timestamp: float
    value: float


class PromClient(Protocol):
    """The one call the source needs; raises SourceUnavailable or AdapterError."""

    def query(self, promql: str, timeout: float) -> list[PromSample]: ...


class HttpPromClient:
    """`GET /api/v1/query` on a Prometheus server (httpx, one pooled client)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client()

    def query(self, promql: str, timeout: float) -> list[PromSample]:
        late = SourceUnavailable(f"Prometheus at {self.url} did not answer within {timeout:g} s")
        deadline = time.monotonic() + timeout
        body = bytearray()
        try:
            with self._client.stream(
                "GET", f"{self.url}/api/v1/query", params={"query": promql}, timeout=timeout
            ) as resp:
                for chunk in resp.iter_bytes():
                    body += chunk
                    if len(body) > MAX_ANSWER_BYTES:
                        raise AdapterError(
                            f"Prometheus at {self.url} answered the query {promql!r} with over "
                            f"{MAX_ANSWER_BYTES // (1024 * 1024)} MiB; aggregate in the query "
                            "(sum by the labels the rule maps) so that it returns one sample "
                            "per selector"
                        )
                    if time.monotonic() > deadline:
                        raise late
        except httpx.TimeoutException:
            raise late from None
        except httpx.HTTPError as exc:
            raise SourceUnavailable(f"Prometheus at {self.url} is unreachable: {exc}") from None
        try:
            doc = json.loads(body)
        except ValueError:
            raise SourceUnavailable(
                f"Prometheus at {self.url} answered HTTP {resp.status_code} without JSON"
            ) from None
        if doc.get("status") != "success":
            msg = f"Prometheus at {self.url} rejected the query {promql!r}: {doc.get('errorType')}: {doc.get('error')}"
            if resp.status_code >= 500 or resp.status_code == 503:
                raise SourceUnavailable(msg)
            raise AdapterError(msg)
        samples = parse_result(doc.get("data", {}))
        if len(samples) > MAX_ANSWER_SAMPLES:
            raise AdapterError(
                f"Prometheus answered the query {promql!r} with {len(samples)} samples, over "
                f"the {MAX_ANSWER_SAMPLES} an adapter read takes; aggregate in the query (sum "
                "by the labels the rule maps) so that it returns one sample per selector"
            )
        return samples

    def close(self) -> None:
        self._client.close()


def parse_result(data: dict[str, Any]) -> list[PromSample]:
    """Samples of a `vector` or `scalar` instant-query result (matrix/string refused)."""
    kind = data.get("resultType")
    result: Any = data.get("result")
    if kind == "scalar":
        return [PromSample({}, float(result[0]), float(result[1]))]
    if kind == "vector":
        return [
            PromSample(dict(r.get("metric", {})), float(r["value"][0]), float(r["value"][1]))
            for r in result
        ]
    raise AdapterError(f"a PromQL rule must return a vector or scalar, got {kind!r}")


class FakePromClient:
    """Canned answers for tests: promql string -> samples (or an exception to raise)."""

    def __init__(self, answers: dict[str, list[PromSample] | Exception] | None = None) -> None:
        self.answers = dict(answers or {})
        self.calls: list[str] = []

    def query(self, promql: str, timeout: float) -> list[PromSample]:
        self.calls.append(promql)
        ans = self.answers.get(promql, [])
        if isinstance(ans, Exception):
            raise ans
        return list(ans)


def _quote(v: str) -> str:
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


def build_matchers(rule: Rule, namespace: str, selector: Selector) -> str:
    """PromQL label matchers for a request (see the module docstring)."""
    return _split(rule, namespace, selector)[0]


def _split(rule: Rule, namespace: str, selector: Selector) -> tuple[str, Selector]:
    """The matchers for the query, and the requirements left to filter the results with
    (those on a label the rule does not map to a Prometheus label, and `<`/`>`). A
    requirement sent as a matcher is not checked again on the results: Prometheus applied
    it, and an aggregating query (`sum by (le)`) drops the label it matched on."""
    to_prom = {label: attr for attr, label in rule.labels}
    parts: list[str] = []
    rest: list[Requirement] = []
    if not rule.cluster_wide and NAMESPACE_LABEL in to_prom:
        parts.append(f"{to_prom[NAMESPACE_LABEL]}={_quote(namespace)}")
    for r in selector.requirements:
        pl = to_prom.get(r.key)
        if pl is None or not _PROM_LABEL.match(pl):
            rest.append(r)  # not a Prometheus label: filtered on the results instead
        elif r.op in ("=", "!="):
            parts.append(f"{pl}{r.op}{_quote(r.values[0])}")
        elif r.op in ("in", "notin"):
            alts = "|".join(re.escape(v) for v in r.values)
            parts.append(f"{pl}{'=~' if r.op == 'in' else '!~'}{_quote(alts)}")
        elif r.op == "exists":
            parts.append(f'{pl}!=""')
        elif r.op == "!":
            parts.append(f'{pl}=""')
        else:
            rest.append(r)
    return ",".join(parts), Selector(tuple(rest))


@dataclass(eq=False)
class PromQLSource:
    """Evaluate `source: promql` rules (cached per query string for `cache_ttl` s)."""

    blocking = True  # an HTTP query: the shells call evaluate in a worker thread

    client: PromClient
    clock: Callable[[], float]
    timeout: float = 5.0
    cache_ttl: float = 5.0
    cache_size: int = 1024
    cache_samples: int = CACHE_MAX_SAMPLES
    _cache: dict[str, tuple[float, list[PromSample]]] = field(
        default_factory=dict, init=False, repr=False
    )
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def ready(self) -> bool:
        return True

    def _query(self, promql: str) -> list[PromSample]:
        now = self.clock()
        with self._lock:
            hit = self._cache.get(promql)
            if hit is not None and now - hit[0] < self.cache_ttl:
                return hit[1]
        samples = self.client.query(promql, self.timeout)
        with self._lock:
            held = sum(len(v) for _, v in self._cache.values())
            if len(self._cache) >= self.cache_size or held + len(samples) > self.cache_samples:
                self._cache.clear()
            if len(samples) <= self.cache_samples:
                self._cache[promql] = (now, samples)
        return samples

    def evaluate(self, rule: Rule, namespace: str, selector: Selector) -> list[MetricValue]:
        assert rule.query is not None
        matchers, rest = _split(rule, namespace, selector)
        if LABEL_MATCHERS not in rule.query:
            rest = selector  # nothing was sent: every requirement filters the results
        promql = rule.query.replace(LABEL_MATCHERS, matchers)
        fresh: list[tuple[PromSample, dict[str, str]]] = []
        stale: list[PromSample] = []
        now = self.clock()
        for smp in self._query(promql):
            labels = {label: smp.labels[attr] for attr, label in rule.labels if attr in smp.labels}
            if not rule.cluster_wide and labels.get(NAMESPACE_LABEL, namespace) != namespace:
                continue
            if not rest.matches(labels):
                continue
            if not math.isfinite(smp.value):
                continue
            if now - smp.timestamp > rule.staleness:
                stale.append(smp)
                continue
            fresh.append((smp, labels))
        if stale and not fresh:
            newest = max(smp.timestamp for smp in stale)
            raise NoFreshData(
                f"metric {rule.name!r}: the newest of the {len(stale)} matching samples is "
                f"{now - newest:.0f} s old, over the {rule.staleness:g} s staleness limit"
            )
        if rule.aggregation == "quantile":
            return _quantile(rule, fresh) if fresh else []
        return [
            MetricValue(rule.name, smp.value, smp.timestamp, rule.window, labels)
            for smp, labels in fresh
        ]


def _histogram(
    rule: Rule, buckets: dict[float, float], labels: dict[str, str]
) -> sli.ExplicitHistogram:
    """Cumulative `le` -> rate to an explicit histogram (counts per bucket, the last the
    +Inf one), with Prometheus' monotonicity fix (a lower count is raised to the running
    maximum)."""
    if math.inf not in buckets:
        raise AdapterError(
            f'metric {rule.name!r}: its query returned buckets without le="+Inf" for '
            f"{describe(labels)}; a quantile needs every bucket of the histogram"
        )
    bounds = sorted(buckets)
    counts: list[float] = []
    below = 0.0
    for le in bounds:
        cum = max(buckets[le], below)
        counts.append(cum - below)
        below = cum
    return sli.ExplicitHistogram(tuple(bounds[:-1]), tuple(counts))


def _quantile(rule: Rule, fresh: list[tuple[PromSample, dict[str, str]]]) -> list[MetricValue]:
    """One value: the quantile of the merged histograms of `fresh` bucket samples."""
    assert rule.quantile is not None
    groups: dict[frozenset[tuple[str, str]], tuple[dict[float, float], dict[str, str]]] = {}
    newest = max(smp.timestamp for smp, _ in fresh)
    for smp, labels in fresh:
        raw = dict(smp.labels)
        le_text = raw.pop("le", None)
        try:
            le = float(le_text) if le_text is not None else math.nan
        except ValueError:
            le = math.nan
        if math.isnan(le):
            raise AdapterError(
                f"metric {rule.name!r}: aggregation quantile needs its query to return bucket "
                "rates by le, as sum by (le) (rate(x_bucket{<<.LabelMatchers>>}[1m])); a sample "
                f"of {describe(raw)} has le={le_text!r}"
            )
        key = frozenset(raw.items())
        buckets, _ = groups.setdefault(key, ({}, labels))
        buckets[le] = buckets.get(le, 0.0) + smp.value
    merged, group = sli.merge_explicit(
        [(_histogram(rule, b, dict(k)), labels) for k, (b, labels) in groups.items()]
    )
    if merged.count == 0:
        raise NoFreshData(
            f"metric {rule.name!r}: the {len(group)} matching histograms have no observations "
            "inside the query's range (a quantile needs one)"
        )
    value = sli.histogram_quantile(rule.quantile, merged)
    labels = common_labels(group)
    refusal = sli.quantile_refusal(rule.quantile, merged, value, rule.max_relative_bucket_width)
    if refusal is not None:
        series = f"the query's buckets {describe(labels)}"
        raise too_coarse(rule, series, len(group), merged.bounds, value, *refusal, labels, newest)
    return [MetricValue(rule.name, value, newest, rule.window, labels)]
