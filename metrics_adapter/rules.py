"""Rules: which external metrics exist and how each is computed from a source.

A rule (YAML, under `rules:` in the adapter config) names one external metric::

    - name: kvspread_request_latency_p95_seconds   # served name (URL path segment)
      source: otlp                  # otlp (embedded receiver, default) | promql
      metric: http.server.request.duration          # otlp: the OTel metric name
      aggregation: quantile         # quantile | rate | ratio | good-rate | last
      quantile: 0.95                # quantile: 0..1
      maxRelativeBucketWidth: 2     # quantile: widest bucket served, (upper - lower) / lower
      threshold: 0.2                # good-rate: latency threshold, seconds
      window: 1m                    # sliding window (default: defaults.window)
      labels:                       # OTel attribute (point, then resource) -> selector label
        k8s.namespace.name: namespace
        service.name: service
        llm.modality: modality
      match: {http.route: "/v1/.*"}   # optional: attribute -> regex (full match) filter
      numerator:                    # ratio: which part of the population is counted
        metric: http.server.request.duration        # default: the rule's metric
        match: {http.response.status_code: "5.."}
      combine: sum                  # last: how gauges of several series combine: sum|mean|max|min
      clusterWide: false            # true: series from every namespace are visible
      extrapolation: none           # none | prometheus (rate edge extrapolation, see sli.py)
      staleness: 2m                 # newer data than this or the value is not served
      query: "..."                  # promql: an instant query; <<.LabelMatchers>> is replaced
                                    #   by the request's namespace and selector as matchers

Semantics: a read selects every series of the rule's metric whose mapped labels match the
request's selector (and whose `namespace` label is the request's namespace unless
clusterWide); the SLI is computed over that whole population (histograms merged before the
quantile is taken, rates summed), giving one value whose `metricLabels` are the labels all
selected series share. An HPA thus gets one number per selector, whatever the pod count.

Invalid rules fail at start with a `ConfigError` naming the key path (rules[3].quantile).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kvspread import names
from kvspread.settings import ConfigError

__all__ = [
    "Rule",
    "Numerator",
    "parse_duration",
    "parse_rules",
    "default_rules",
    "DEFAULT_LABELS",
    "DEFAULT_WINDOW_S",
    "DEFAULT_STALENESS_S",
    "DEFAULT_GOOD_THRESHOLD_S",
    "DEFAULT_MAX_RELATIVE_BUCKET_WIDTH",
    "AGGREGATIONS",
]

AGGREGATIONS: Final = ("quantile", "rate", "ratio", "good-rate", "last")
COMBINES: Final = ("sum", "mean", "max", "min")
DEFAULT_WINDOW_S: Final = 60.0
"""docs/design.md section 6: windows default to 1 min."""
DEFAULT_STALENESS_S: Final = 120.0
"""Two windows: a value whose newest point is older is not served (the HPA sees no metric)."""
DEFAULT_MAX_RELATIVE_BUCKET_WIDTH: Final = 2.0
"""A quantile is served only from a bucket at most twice as wide as its lower bound (the
smallest value the truth can have): the widest
the collector's own bounds (docs/metrics.md) and the semantic-convention bounds ever give
above their first bucket, e.g. (10, 30] at 10 s (docs/adapter.md, "Coarse histograms")."""
DEFAULT_GOOD_THRESHOLD_S: Final = 0.2
"""The design notes' HPA example counts requests faster than 0.2 s as good."""
DEFAULT_LABELS: Final = (
    (names.ATTR_K8S_NAMESPACE, "namespace"),
    (names.ATTR_SERVICE_NAME, "service"),
    (names.ATTR_MODALITY, "modality"),
    (names.ATTR_MODEL, "model"),
    (names.ATTR_K8S_POD, "pod"),
)
"""OTel attribute -> selector label used by the default rules."""
NAMESPACE_LABEL: Final = "namespace"

_METRIC_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,252}$")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


@dataclass(frozen=True)
class Numerator:
    """The counted part of a ratio: a metric (default the rule's) and attribute filters."""

    metric: str | None = None
    match: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Rule:
    """One external metric (see the module docstring for each field)."""

    name: str
    aggregation: str
    source: str = "otlp"
    metric: str | None = None
    query: str | None = None
    quantile: float | None = None
    max_relative_bucket_width: float = DEFAULT_MAX_RELATIVE_BUCKET_WIDTH
    threshold: float | None = None
    window: float = DEFAULT_WINDOW_S
    labels: tuple[tuple[str, str], ...] = DEFAULT_LABELS
    match: tuple[tuple[str, str], ...] = ()
    numerator: Numerator | None = None
    combine: str = "sum"
    cluster_wide: bool = False
    extrapolation: str = "none"
    staleness: float = DEFAULT_STALENESS_S
    _patterns: dict[str, re.Pattern[str]] = field(default_factory=dict, compare=False, repr=False)

    def label_for(self, attribute: str) -> str | None:
        for a, label in self.labels:
            if a == attribute:
                return label
        return None

    def namespace_attribute(self) -> str | None:
        for a, label in self.labels:
            if label == NAMESPACE_LABEL:
                return a
        return None

    def pattern(self, regex: str) -> re.Pattern[str]:
        p = self._patterns.get(regex)
        if p is None:
            p = re.compile(regex)
            self._patterns[regex] = p
        return p


def parse_duration(value: Any, key: str) -> float:
    """`90`, `90s`, `1m30s`, `500ms`, `2h` -> seconds (> 0); ConfigError naming `key`."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: {value!r} is not a duration")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        pos, seconds = 0, 0.0
        for m in _DURATION.finditer(text):
            if m.start() != pos:
                break
            n = float(m.group(1))
            seconds += n * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[m.group(2)]
            pos = m.end()
        if pos != len(text):
            try:
                seconds = float(text)
            except ValueError:
                raise ConfigError(
                    f"{key}: {value!r} is not a duration (e.g. 30s, 1m, 1m30s, 500ms)"
                ) from None
    else:
        raise ConfigError(f"{key}: {value!r} is not a duration")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{key}: {value!r} must be a positive duration")
    return seconds


def _str_map(value: Any, key: str, check_regex: bool = False) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: want a mapping of attribute -> string, got {value!r}")
    out = []
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str | int) or isinstance(v, bool):
            raise ConfigError(f"{key}.{k}: want a string, got {v!r}")
        if check_regex:
            try:
                re.compile(str(v))
            except re.error as exc:
                raise ConfigError(f"{key}.{k}: {v!r} is not a regular expression: {exc}") from None
        out.append((k, str(v)))
    return tuple(out)


_RULE_KEYS: Final = {
    "name", "source", "metric", "query", "aggregation", "quantile", "threshold", "window",
    "labels", "match", "numerator", "combine", "clusterWide", "cluster_wide", "extrapolation",
    "staleness", "maxRelativeBucketWidth",
}  # fmt: skip


def _rule(doc: Any, key: str, defaults: Mapping[str, float]) -> Rule:
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{key}: want a mapping, got {doc!r}")
    unknown = sorted(set(map(str, doc)) - _RULE_KEYS)
    if unknown:
        raise ConfigError(
            f"{key}.{unknown[0]}: unknown key (known: {', '.join(sorted(_RULE_KEYS))})"
        )
    name = doc.get("name")
    if not isinstance(name, str) or not _METRIC_NAME.match(name):
        raise ConfigError(f"{key}.name: {name!r} is not a valid metric name ([A-Za-z0-9_.:-])")
    source = doc.get("source", "otlp")
    if source not in ("otlp", "promql"):
        raise ConfigError(f"{key}.source: {source!r} is not one of otlp, promql")
    agg = doc.get("aggregation", "last" if source == "promql" else None)
    if agg not in AGGREGATIONS:
        raise ConfigError(f"{key}.aggregation: {agg!r} is not one of {', '.join(AGGREGATIONS)}")
    metric, query = doc.get("metric"), doc.get("query")
    if source == "otlp":
        if not isinstance(metric, str) or not metric:
            raise ConfigError(f"{key}.metric: an otlp rule needs the OTel metric name")
        if query is not None:
            raise ConfigError(f"{key}.query: only promql rules take a query")
    else:
        if not isinstance(query, str) or not query.strip():
            raise ConfigError(f"{key}.query: a promql rule needs a query")
        if agg != "last":
            raise ConfigError(
                f"{key}.aggregation: a promql rule computes its value in the query; "
                "use aggregation: last (or leave it out)"
            )
    q = doc.get("quantile")
    if agg == "quantile":
        if isinstance(q, bool) or not isinstance(q, int | float) or not 0 <= q <= 1:
            raise ConfigError(f"{key}.quantile: want a number in [0, 1], got {q!r}")
        q = float(q)
    elif q is not None:
        raise ConfigError(f"{key}.quantile: only aggregation quantile takes a quantile")
    width = doc.get("maxRelativeBucketWidth", DEFAULT_MAX_RELATIVE_BUCKET_WIDTH)
    if agg != "quantile" and "maxRelativeBucketWidth" in doc:
        raise ConfigError(
            f"{key}.maxRelativeBucketWidth: only aggregation quantile takes a bucket width"
        )
    if isinstance(width, bool) or not isinstance(width, int | float) or not width > 0:
        raise ConfigError(f"{key}.maxRelativeBucketWidth: want a number > 0, got {width!r}")
    thr = doc.get("threshold")
    if agg == "good-rate":
        thr = DEFAULT_GOOD_THRESHOLD_S if thr is None else parse_duration(thr, f"{key}.threshold")
    elif thr is not None:
        raise ConfigError(f"{key}.threshold: only aggregation good-rate takes a threshold")
    num = doc.get("numerator")
    numerator = None
    if agg == "ratio":
        if not isinstance(num, Mapping):
            raise ConfigError(f"{key}.numerator: a ratio needs numerator: {{metric, match}}")
        extra = sorted(set(map(str, num)) - {"metric", "match"})
        if extra:
            raise ConfigError(f"{key}.numerator.{extra[0]}: unknown key (known: metric, match)")
        nm = num.get("metric")
        if nm is not None and not isinstance(nm, str):
            raise ConfigError(f"{key}.numerator.metric: want a metric name, got {nm!r}")
        numerator = Numerator(nm, _str_map(num.get("match"), f"{key}.numerator.match", True))
        if numerator.metric is None and not numerator.match:
            raise ConfigError(f"{key}.numerator: give a metric or a match (else the ratio is 1)")
    elif num is not None:
        raise ConfigError(f"{key}.numerator: only aggregation ratio takes a numerator")
    combine = doc.get("combine", "sum")
    if combine not in COMBINES:
        raise ConfigError(f"{key}.combine: {combine!r} is not one of {', '.join(COMBINES)}")
    cw = doc.get("clusterWide", doc.get("cluster_wide", False))
    if not isinstance(cw, bool):
        raise ConfigError(f"{key}.clusterWide: want true or false, got {cw!r}")
    extrap = doc.get("extrapolation", "none")
    if extrap not in ("none", "prometheus"):
        raise ConfigError(f"{key}.extrapolation: {extrap!r} is not one of none, prometheus")
    labels = _str_map(doc["labels"], f"{key}.labels") if "labels" in doc else DEFAULT_LABELS
    for attr, label in labels:
        if not re.match(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$", label):
            raise ConfigError(f"{key}.labels.{attr}: {label!r} is not a valid label name")
    if not cw and NAMESPACE_LABEL not in {label for _, label in labels}:
        raise ConfigError(
            f"{key}.labels: a namespaced rule must map some attribute to the label "
            f"{NAMESPACE_LABEL!r} (or set clusterWide: true)"
        )
    window = parse_duration(doc.get("window", defaults["window"]), f"{key}.window")
    staleness = parse_duration(doc.get("staleness", defaults["staleness"]), f"{key}.staleness")
    return Rule(
        name=name,
        aggregation=agg,
        source=source,
        metric=metric if source == "otlp" else None,
        query=query if source == "promql" else None,
        quantile=q if agg == "quantile" else None,
        max_relative_bucket_width=float(width),
        threshold=thr if agg == "good-rate" else None,
        window=window,
        labels=labels,
        match=_str_map(doc.get("match"), f"{key}.match", True),
        numerator=numerator,
        combine=combine,
        cluster_wide=cw,
        extrapolation=extrap,
        staleness=staleness,
    )


def parse_rules(
    docs: Any,
    window: float = DEFAULT_WINDOW_S,
    staleness: float = DEFAULT_STALENESS_S,
    key: str = "rules",
) -> tuple[Rule, ...]:
    """Strictly parse a list of rule mappings; ConfigError names the bad key path."""
    if not isinstance(docs, Sequence) or isinstance(docs, str):
        raise ConfigError(f"{key}: want a list of rules, got {docs!r}")
    out: list[Rule] = []
    seen: set[str] = set()
    defaults = {"window": window, "staleness": staleness}
    for i, d in enumerate(docs):
        r = _rule(d, f"{key}[{i}]", defaults)
        if r.name in seen:
            raise ConfigError(f"{key}[{i}].name: {r.name!r} is defined twice")
        seen.add(r.name)
        out.append(r)
    return tuple(out)


def default_rules(
    window: float = DEFAULT_WINDOW_S,
    staleness: float = DEFAULT_STALENESS_S,
    good_threshold: float = DEFAULT_GOOD_THRESHOLD_S,
) -> tuple[Rule, ...]:
    """The SLIs of docs/design.md section 6, from the collector's metric names (kvspread.names)."""
    dur = names.HTTP_SERVER_REQUEST_DURATION.name
    docs: list[dict[str, Any]] = [
        {"name": names.SLI_LATENCY_P50, "metric": dur, "aggregation": "quantile", "quantile": 0.5},
        {"name": names.SLI_LATENCY_P95, "metric": dur, "aggregation": "quantile", "quantile": 0.95},
        {"name": names.SLI_LATENCY_P99, "metric": dur, "aggregation": "quantile", "quantile": 0.99},
        {"name": names.SLI_REQUESTS_PER_SECOND, "metric": dur, "aggregation": "rate"},
        {
            "name": names.SLI_GOOD_REQUESTS_PER_SECOND,
            "metric": dur,
            "aggregation": "good-rate",
            "threshold": good_threshold,
        },
        {
            "name": names.SLI_ERROR_RATIO,
            "metric": dur,
            "aggregation": "ratio",
            "numerator": {"match": {names.ATTR_HTTP_STATUS: "5[0-9][0-9]"}},
        },
        {
            "name": names.SLI_QUEUE_DEPTH,
            "metric": names.ENGINE_REQUESTS_WAITING.name,
            "aggregation": "last",
            "combine": "sum",
        },
        {
            "name": names.SLI_KV_CACHE_USAGE,
            "metric": names.KV_CACHE_USAGE.name,
            "aggregation": "last",
            "combine": "mean",
        },
        {
            "name": names.SLI_TTFT_P95,
            "metric": names.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN.name,
            "aggregation": "quantile",
            "quantile": 0.95,
        },
        {
            "name": names.SLI_TPOT_P95,
            "metric": names.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN.name,
            "aggregation": "quantile",
            "quantile": 0.95,
        },
    ]
    return parse_rules(docs, window, staleness, key="default_rules")
