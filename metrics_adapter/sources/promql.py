"""PromQL source: a rule's value from an instant query against the Prometheus HTTP API.

The rule's `query` may contain `<<.LabelMatchers>>` (as in prometheus-adapter); it is
replaced by matchers built from the request: the namespace (through the label the rule maps
to `namespace`) and each selector requirement (`=` -> `l="v"`, `!=` -> `l!="v"`, `in` ->
`l=~"a|b"`, `notin` -> `l!~"a|b"`, `key` -> `l!=""`, `!key` -> `l=""`; `<`/`>` are applied to
the results). The rule's `labels` map Prometheus label names to selector labels. Each
sample of the result becomes one value (the query decides how to aggregate).

The client is a narrow protocol, `PromClient.query(promql, timeout)`, so that tests can use
`FakePromClient`; `HttpPromClient` talks to a real server with httpx. Answers are cached
for `cache_ttl` seconds per final query string, and a down or slow Prometheus becomes a
`SourceUnavailable` (503) whose message names the URL and the cause.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from metrics_adapter.errors import AdapterError, NoFreshData, SourceUnavailable
from metrics_adapter.rules import NAMESPACE_LABEL, Rule
from metrics_adapter.selectors import Selector
from metrics_adapter.values import MetricValue

__all__ = [
    "PromClient",
    "PromSample",
    "HttpPromClient",
    "FakePromClient",
    "PromQLSource",
    "build_matchers",
    "parse_result",
]

LABEL_MATCHERS = "<<.LabelMatchers>>"
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
        try:
            resp = self._client.get(
                f"{self.url}/api/v1/query", params={"query": promql}, timeout=timeout
            )
        except httpx.TimeoutException:
            raise SourceUnavailable(
                f"Prometheus at {self.url} did not answer within {timeout:g} s"
            ) from None
        except httpx.HTTPError as exc:
            raise SourceUnavailable(f"Prometheus at {self.url} is unreachable: {exc}") from None
        try:
            doc = resp.json()
        except ValueError:
            raise SourceUnavailable(
                f"Prometheus at {self.url} answered HTTP {resp.status_code} without JSON"
            ) from None
        if doc.get("status") != "success":
            msg = f"Prometheus at {self.url} rejected the query {promql!r}: {doc.get('errorType')}: {doc.get('error')}"
            if resp.status_code >= 500 or resp.status_code == 503:
                raise SourceUnavailable(msg)
            raise AdapterError(msg)
        return parse_result(doc.get("data", {}))

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
    to_prom = {label: attr for attr, label in rule.labels}
    parts: list[str] = []
    if not rule.cluster_wide and NAMESPACE_LABEL in to_prom:
        parts.append(f"{to_prom[NAMESPACE_LABEL]}={_quote(namespace)}")
    for r in selector.requirements:
        pl = to_prom.get(r.key)
        if pl is None or not _PROM_LABEL.match(pl):
            continue  # not a Prometheus label: filtered on the results instead
        if r.op in ("=", "!="):
            parts.append(f"{pl}{r.op}{_quote(r.values[0])}")
        elif r.op in ("in", "notin"):
            alts = "|".join(re.escape(v) for v in r.values)
            parts.append(f"{pl}{'=~' if r.op == 'in' else '!~'}{_quote(alts)}")
        elif r.op == "exists":
            parts.append(f'{pl}!=""')
        elif r.op == "!":
            parts.append(f'{pl}=""')
    return ",".join(parts)


@dataclass(eq=False)
class PromQLSource:
    """Evaluate `source: promql` rules (cached per query string for `cache_ttl` s)."""

    blocking = True  # an HTTP query: the shells call evaluate in a worker thread

    client: PromClient
    clock: Callable[[], float]
    timeout: float = 5.0
    cache_ttl: float = 5.0
    cache_size: int = 1024
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
            if len(self._cache) >= self.cache_size:
                self._cache.clear()
            self._cache[promql] = (now, samples)
        return samples

    def evaluate(self, rule: Rule, namespace: str, selector: Selector) -> list[MetricValue]:
        assert rule.query is not None
        promql = rule.query.replace(LABEL_MATCHERS, build_matchers(rule, namespace, selector))
        out: list[MetricValue] = []
        stale: list[PromSample] = []
        now = self.clock()
        for smp in self._query(promql):
            labels = {label: smp.labels[attr] for attr, label in rule.labels if attr in smp.labels}
            if not rule.cluster_wide and labels.get(NAMESPACE_LABEL, namespace) != namespace:
                continue
            if not selector.matches(labels):
                continue
            if not math.isfinite(smp.value):
                continue
            if now - smp.timestamp > rule.staleness:
                stale.append(smp)
                continue
            out.append(MetricValue(rule.name, smp.value, smp.timestamp, rule.window, labels))
        if stale and not out:
            newest = max(smp.timestamp for smp in stale)
            raise NoFreshData(
                f"metric {rule.name!r}: the newest of the {len(stale)} matching samples is "
                f"{now - newest:.0f} s old, over the {rule.staleness:g} s staleness limit"
            )
        return out
