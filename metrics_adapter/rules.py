"""Rules: which external metrics exist and how each is computed from a source.

A rule (YAML, under `rules:` in the adapter config) names one external metric::

    - name: kvspread_request_latency_p95_seconds   # served name (URL path segment)
      source: otlp                  # otlp (embedded receiver, default) | promql
      metric: http.server.request.duration          # otlp: the OTel metric name
      aggregation: quantile         # quantile | rate | ratio | good-rate | over-ratio | last
      quantile: 0.95                # quantile: 0..1
      maxRelativeBucketWidth: 2     # quantile: widest bucket served, (upper - lower) / lower
      threshold: 0.2                # good-rate: latency threshold, seconds; over-ratio:
                                    #   the bucket bound above which observations count
      window: 1m                    # sliding window (default: defaults.window)
      labels:                       # OTel attribute (point, then resource) -> selector label
        k8s.namespace.name: namespace
        service.name: service
        llm.modality: modality
      match: {http.route: "/v1/.*"}   # optional: attribute -> regex (full match) filter
      numerator:                    # ratio: which part of the population is counted
        metric: http.server.request.duration        # default: the rule's metric
        match: {http.response.status_code: "5.."}
      combine: sum                  # last: how gauges of several series combine:
                                    #   sum|mean|max|min|count (count: how many series)
      clusterWide: false            # true: series from every namespace are visible
      extrapolation: none           # none | prometheus (rate edge extrapolation, see sli.py)
      staleness: 2m                 # newer data than this or the value is not served
      query: "..."                  # promql: an instant query; <<.LabelMatchers>> is replaced
                                    #   by the request's namespace and selector as matchers;
                                    #   its value as is (aggregation: last), or, with
                                    #   aggregation: quantile, bucket rates (one sample per
                                    #   `le`) the adapter merges, takes the quantile of and
                                    #   refuses as an OTLP histogram (sources/promql.py)

An `slo-pressure` rule computes nothing from a source itself: it reads other rules (its
`terms`) for the same namespace and selector and serves max(term value / term target), the
SLO pressure. An HPA or KEDA trigger with a Value target of 1 then asks for
ceil(replicas x pressure) replicas::

    - name: kvspread_slo_pressure
      aggregation: slo-pressure
      terms:                        # rule name -> default target (in that rule's unit)
        kvspread_time_to_first_token_p95_seconds: 2
        kvspread_time_per_output_token_p95_seconds: 0.05
        kvspread_queue_depth_per_replica: 4
      classes:                      # SLO class -> targets that replace the defaults
        batch: {kvspread_time_to_first_token_p95_seconds: 10}
      services:                     # service -> its class and its own targets
        chat: {class: realtime, kvspread_time_to_first_token_p95_seconds: 1}
      serviceLabel: service         # the selector label that names the service
      classLabel: qos               # the label whose value names a service's class where
                                    #   `services:` gives none (the selector's, else the
                                    #   value every term's series share: llm.qos)
      holdOnly: []                  # terms whose ratio counts at most 1: they hold the
                                    #   replicas serving now, never add one (an over-ratio
                                    #   share: too many misses to let a replica go)
      trend:                        # optional, off unless given: the predictive term
        short: kvspread_requests_per_second       # a rate rule (the current rate)
        long: kvspread_requests_per_second_long   # the same rate over a longer window
        replicas: kvspread_engine_replicas        # serving replicas (last, combine count)
        lead: 2m                    # how far ahead: a replica's start + warm-up (<= 10m)
        capacity: 2                 # requests/s per replica at pressure 1
        maxGrowth: 2                # the prediction is at most this x the current rate
        minRise: 0.1                # the term is left out unless short > long x (1 + this)
      guard:                        # optional (on in the default rules): scale-down guard
        replicas: kvspread_engine_replicas        # serving replicas (last, combine count)
        rate: kvspread_requests_per_second        # the request rate they serve
        window: 30m                 # how long a pressure over 1 refuses the counts under it
        fraction: 0.8               # a count is allowed again once its rate per replica is
                                    #   under this x the one that missed the SLO
      step:                         # optional, off unless given: latency terms by a step
        terms: [kvspread_time_to_first_token_p95_seconds]  # terms that step, not scale
        replicas: kvspread_engine_replicas        # serving replicas (last, combine count)
        pods: 1                     # over target: at most this many replicas more (1-10)
        minRatio: 1.12              # ... but at least this ratio (above the HPA's tolerance)
        hold: 0.8                   # hold..1 x target: 1 (keep); below: the term left out
                                    #   (or per term: {kvspread_time_to_first_token...: 0.6})

A target `off` (under `terms:`, a class or a service) leaves that term out for them: the
over-budget shares are per class (realtime's 50 ms per token, batch's 120 ms), so a rule
that names both turns each off for the other class::

      terms: {kvspread_requests_over_50ms_per_token_ratio: 0.05,
              kvspread_requests_over_120ms_per_token_ratio: off}
      classes:
        batch: {kvspread_requests_over_50ms_per_token_ratio: off,
                kvspread_requests_over_120ms_per_token_ratio: 0.05}
      holdOnly: [kvspread_requests_over_50ms_per_token_ratio,
                 kvspread_requests_over_120ms_per_token_ratio]

An `over-ratio` rule serves the share (0..1) of a histogram's observations over the window
that lie above `threshold`, which must be one of its bucket bounds: the count at or under a
bound is exact, a share inside a bucket would be a guess, so such a read (and one of an
exponential histogram) is refused with 422 (reason `threshold_not_a_bound`).

A service's `trendCapacity` (under `services:`) replaces `capacity`. The trend term is
predicted rate / (replicas x capacity), metricLabels.term `trend` (metrics_adapter.trend).
A term under `step:` serves a bounded step instead of value / target (metrics_adapter.step).
With `guard:` the served value holds the replicas that a recent pressure over 1 showed too few
for the rate per replica now, metricLabels.term `guard` (metrics_adapter.guard).

A service's class: its `class` under `services:`; else the selector's `classLabel`
equality (`qos=batch`; that label then picks the targets, not the series the terms read);
else the value of `classLabel` that every term value carrying it shares (the collector
stamps `llm.qos` from the pod's `kvspread.io/qos` label on its request and token series,
mapped to `qos` by the default rules), when it names one of the rule's classes; else none
(the default targets). metricLabels.class names the class that applied.

A term without a fresh value is left out (no traffic, no TTFT); a term whose quantile is
refused refuses the whole pressure (the HPA then keeps its replicas); no term with a value
is no fresh data.

Semantics: a read selects every series of the rule's metric whose mapped labels match the
request's selector (and whose `namespace` label is the request's namespace unless
clusterWide); the SLI is computed over that whole population (histograms merged before the
quantile is taken, rates summed), giving one value whose `metricLabels` are the labels all
selected series share. An HPA thus gets one number per selector, whatever the pod count.

Invalid rules fail at start with a `ConfigError` naming the key path (rules[3].quantile).
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kvspread import names
from kvspread.settings import ConfigError
from metrics_adapter.guard import FRACTION, MAX_WINDOW_S, WINDOW_S, Guard
from metrics_adapter.selectors import label_key_problem
from metrics_adapter.step import HOLD, MAX_STEP_PODS, MIN_RATIO, PODS, Step
from metrics_adapter.trend import MAX_GROWTH, MAX_LEAD_S, Trend

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
    "Pressure",
    "DEFAULT_PRESSURE_TERMS",
    "DEFAULT_PRESSURE_CLASSES",
    "pressure_rule",
    "trend_doc",
    "step_doc",
    "guard_doc",
    "TREND_LONG_WINDOWS",
    "LATENCY_TERMS",
    "OFF",
    "OVER_BUDGET_SHARE",
    "OVER_BUDGET_WINDOWS",
    "OVER_BUDGET_TERMS",
    "over_budget_terms",
]

AGGREGATIONS: Final = (
    "quantile", "rate", "ratio", "good-rate", "over-ratio", "last", "slo-pressure",
)  # fmt: skip
COMBINES: Final = ("sum", "mean", "max", "min", "count")
DEFAULT_WINDOW_S: Final = 60.0
"""docs/design.md section 6: windows default to 1 min."""
DEFAULT_STALENESS_S: Final = 120.0
"""Two windows: a value whose newest point is older is not served (the HPA sees no metric)."""
DEFAULT_MAX_RELATIVE_BUCKET_WIDTH: Final = 2.0
"""A quantile is served only from a bucket at most twice as wide as its lower bound (the
smallest value the truth can have): the widest
the collector's own bounds (docs/metrics.md) and the semantic-convention bounds ever give
above their first bucket, e.g. (10, 30] at 10 s (docs/adapter.md, "Coarse histograms")."""
TREND_LONG_WINDOWS: Final = 5
"""The long request-rate window of the default rules (`kvspread_requests_per_second_long`)
in windows: 5 min at the default 1 min, the trend term's baseline (metrics_adapter.trend)."""
DEFAULT_GOOD_THRESHOLD_S: Final = 0.2
"""The design notes' HPA example counts requests faster than 0.2 s as good."""
OVER_BUDGET_SHARE: Final = 0.05
"""A target for the over-budget terms where a pressure rule names them (the default one does
not): 5 % of a service's streamed requests over their per-token budget. Measured in the
serving simulation, off by default because it bought nothing there (docs/evaluation.md,
"An over-budget share in the pressure (session 25)")."""
OVER_BUDGET_WINDOWS: Final = 2
"""The over-budget shares' window in windows (as `TREND_LONG_WINDOWS`): 2 min at the default
1 min, twice the requests per read for a share of tens of requests a minute (1, 5, 10 and
30 min measured the same in the serving simulation, docs/evaluation.md)."""
OFF: Final = math.inf
"""The target `off` (YAML; a bare `off` is YAML 1.1's false, which counts too, as does the
string "off"): the term does not apply to that class or service (left out)."""
DEFAULT_PRESSURE_TERMS: Final = (
    (names.SLI_TTFT_P95, 2.0),
    (names.SLI_TPOT_P95, 0.05),
    (names.SLI_QUEUE_DEPTH_PER_REPLICA, 4.0),
    (names.SLI_KV_CACHE_USAGE, 0.9),
)
"""The default SLO-pressure terms and targets (docs/adapter.md, "SLO pressure"): TPOT 50 ms
is the realtime per-token step of docs/design.md section 2; TTFT 2 s and 4 waiting requests
per replica are this project's choices (looser ones, TTFT 3-4 s or 8 waiting for every
class, saved no GPU-hours in the serving simulation, docs/evaluation.md section 3); KV usage
0.9 leaves vLLM room before it preempts (an assumption). The over-budget shares are not
terms here (`OVER_BUDGET_TERMS`: how to add them)."""
DEFAULT_PRESSURE_CLASSES: Final = (
    ("realtime", ((names.SLI_TTFT_P95, 2.0), (names.SLI_TPOT_P95, 0.05))),
    (
        "batch",
        (
            (names.SLI_TTFT_P95, 10.0),
            (names.SLI_TPOT_P95, 0.12),
            (names.SLI_QUEUE_DEPTH_PER_REPLICA, 40.0),
        ),
    ),
)
"""Per SLO class: realtime 50 ms and batch 120 ms per token (docs/design.md section 2); a
batch replica may hold 40 waiting requests, the queue it drains within the batch TTFT target
at 4 requests/s (Little's law; the default 4 is realtime's 2 s x 2 requests/s). In the
serving simulation the batch 40 took 5 % of slo's GPU-hours off at the same realtime SLO
(docs/evaluation.md section 3, "A batch queue target")."""
OVER_BUDGET_TERMS: Final = (names.SLI_OVER_50MS_PER_TOKEN, names.SLI_OVER_120MS_PER_TOKEN)
"""The over-budget shares (realtime's 50 ms and batch's 120 ms per token) as a pressure rule
would name them: each with `OVER_BUDGET_SHARE` for its class and `off` for the other, and
under `holdOnly`. A share over budget says the replicas serving now are too few to let one
go, not how many more are needed: a request of a few output tokens misses on its TTFT
alone at any replica count, so as a proportional term the share scaled vision to 3.4
replicas in the simulation (docs/evaluation.md)."""
DEFAULT_LABELS: Final = (
    (names.ATTR_K8S_NAMESPACE, "namespace"),
    (names.ATTR_SERVICE_NAME, "service"),
    (names.ATTR_MODALITY, "modality"),
    (names.ATTR_MODEL, "model"),
    (names.ATTR_K8S_POD, "pod"),
    (names.ATTR_QOS, "qos"),
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
class Pressure:
    """The terms of an `slo-pressure` rule and their targets per SLO class and service."""

    terms: tuple[tuple[str, float], ...]
    """(rule name, default target)."""
    classes: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()
    services: tuple[tuple[str, str | None, tuple[tuple[str, float], ...]], ...] = ()
    """(service, its SLO class or None, its own targets)."""
    service_label: str = "service"
    class_label: str = "qos"
    """The selector / metric label naming a service's SLO class where `services:` names none."""
    trend: Trend | None = None
    """The predictive term (None: off)."""
    trend_capacity: tuple[tuple[str, float], ...] = ()
    """(service, its `trendCapacity`)."""
    step: Step | None = None
    """The step rule of the latency terms (None: every term is proportional)."""
    guard: Guard | None = None
    """The scale-down guard (None: off)."""
    hold_only: tuple[str, ...] = ()
    """Terms whose ratio is at most 1: they can hold replicas against a scale-down, never
    add one (nor record a guard violation)."""

    def capacity_for(self, service: str | None) -> float:
        """Requests/s per replica at pressure 1 for `service` (the trend term's divisor)."""
        assert self.trend is not None
        return dict(self.trend_capacity).get(service or "", self.trend.capacity)

    def class_for(self, service: str | None, seen: str | None = None) -> str | None:
        """`service`'s SLO class: the one `services:` gives it, else `seen` (the selector's
        or the series' class label) when it is one of the rule's classes, else None."""
        for name, cls, _ in self.services:
            if name == service and cls is not None:
                return cls
        return seen if seen is not None and seen in dict(self.classes) else None

    def targets_for(self, service: str | None, seen: str | None = None) -> dict[str, float]:
        """term -> target for `service`: defaults, then its class's (`class_for`), then
        its own."""
        return self.targets_of(service, self.class_for(service, seen))

    def targets_of(self, service: str | None, cls: str | None) -> dict[str, float]:
        """term -> target for `service` in class `cls` (one of the rule's, or None)."""
        out = dict(self.terms)
        if cls is not None:
            out.update(dict(self.classes)[cls])
        for name, _, own in self.services:
            if name == service:
                out.update(own)
        return out


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
    pressure: Pressure | None = None
    """The terms of an `slo-pressure` rule (None for every other aggregation)."""
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
    "staleness", "maxRelativeBucketWidth", "terms", "classes", "services", "serviceLabel",
    "classLabel", "trend", "step", "guard", "holdOnly",
}  # fmt: skip
_PRESSURE_KEYS: Final = {"name", "aggregation", "terms", "classes", "services", "serviceLabel",
                         "classLabel", "window", "staleness", "trend", "step",
                         "guard", "holdOnly"}  # fmt: skip
_TREND_KEYS: Final = {"short", "long", "replicas", "lead", "capacity", "maxGrowth", "minRise"}
_STEP_KEYS: Final = {"terms", "replicas", "pods", "minRatio", "hold"}
_GUARD_KEYS: Final = {"replicas", "rate", "window", "fraction"}
MAX_PRESSURE_TERMS: Final = 16
"""Terms one pressure rule may read (each is one more rule evaluation per read)."""
MAX_PRESSURE_SERVICES: Final = 1000
"""Services one pressure rule may list targets for."""


def _targets(value: Any, key: str, allow_class: bool = False) -> tuple[tuple[str, float], ...]:
    """{rule name: target > 0, or `off` (stored as `OFF`)} (and, for a service, a `class`
    key taken out by the caller)."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: want a mapping of rule name -> target, got {value!r}")
    out = []
    for term, target in value.items():
        if allow_class and term in ("class", "trendCapacity"):
            continue
        if not isinstance(term, str) or not _METRIC_NAME.match(term):
            raise ConfigError(f"{key}: {term!r} is not a rule name")
        if target == "off" or target is False:  # YAML 1.1 reads a bare `off` as false
            out.append((term, OFF))
            continue
        if (
            isinstance(target, bool)
            or not isinstance(target, int | float)
            or not math.isfinite(target)
            or target <= 0
        ):
            hint = ""
            if isinstance(target, str):
                with contextlib.suppress(ValueError):
                    float(target)
                    hint = (
                        " (a string: YAML 1.1 reads an exponent without a dot, 1e-3, as"
                        " text; write 1.0e-3)"
                    )
            raise ConfigError(f"{key}.{term}: want a target > 0 or off, got {target!r}{hint}")
        out.append((term, float(target)))
    return tuple(out)


def _pressure(doc: Mapping[str, Any], key: str) -> Pressure:
    extra = sorted(set(map(str, doc)) - _PRESSURE_KEYS)
    if extra:
        raise ConfigError(
            f"{key}.{extra[0]}: not a key of an slo-pressure rule "
            f"(known: {', '.join(sorted(_PRESSURE_KEYS))})"
        )
    terms = _targets(doc.get("terms"), f"{key}.terms")
    if not terms or len(terms) > MAX_PRESSURE_TERMS:
        raise ConfigError(f"{key}.terms: want 1 to {MAX_PRESSURE_TERMS} terms, got {len(terms)}")
    known = {t for t, _ in terms}
    raw_classes = doc.get("classes") or {}
    if not isinstance(raw_classes, Mapping):
        raise ConfigError(f"{key}.classes: want a mapping of class -> targets")
    classes = tuple((str(c), _targets(v, f"{key}.classes.{c}")) for c, v in raw_classes.items())
    raw_services = doc.get("services") or {}
    if not isinstance(raw_services, Mapping) or len(raw_services) > MAX_PRESSURE_SERVICES:
        raise ConfigError(
            f"{key}.services: want a mapping of service -> targets "
            f"(at most {MAX_PRESSURE_SERVICES})"
        )
    services = []
    for svc, v in raw_services.items():
        where = f"{key}.services.{svc}"
        own = _targets(v, where, allow_class=True)
        cls = v.get("class")
        if cls is not None and cls not in dict(classes):
            raise ConfigError(f"{where}.class: {cls!r} is not one of the rule's classes")
        services.append((str(svc), None if cls is None else str(cls), own))
    for where, targets in [(f"{key}.classes.{c}", t) for c, t in classes] + [
        (f"{key}.services.{s}", t) for s, _, t in services
    ]:
        for term, _ in targets:
            if term not in known:
                raise ConfigError(f"{where}.{term}: not one of the rule's terms")
    label = doc.get("serviceLabel", "service")
    if not isinstance(label, str) or not label:
        raise ConfigError(f"{key}.serviceLabel: want a selector label name, got {label!r}")
    if problem := label_key_problem(label):
        raise ConfigError(f"{key}.serviceLabel: {problem}")
    class_label = doc.get("classLabel", "qos")
    if not isinstance(class_label, str) or not class_label or class_label == label:
        raise ConfigError(
            f"{key}.classLabel: want a selector label name other than serviceLabel, "
            f"got {class_label!r}"
        )
    if problem := label_key_problem(class_label):
        raise ConfigError(f"{key}.classLabel: {problem}")
    trend = _trend(doc["trend"], f"{key}.trend") if doc.get("trend") is not None else None
    capacities = []
    for svc, v in raw_services.items():
        if "trendCapacity" in v:
            if trend is None:
                raise ConfigError(f"{key}.services.{svc}.trendCapacity: the rule has no trend")
            capacities.append((str(svc), _positive(v["trendCapacity"],
                                                   f"{key}.services.{svc}.trendCapacity")))  # fmt: skip
    step = _step(doc["step"], f"{key}.step") if doc.get("step") is not None else None
    for t in step.terms if step else ():
        if t not in known:
            raise ConfigError(f"{key}.step.terms: {t!r} is not one of the rule's terms")
    guard = _guard(doc["guard"], f"{key}.guard") if doc.get("guard") is not None else None
    hold_only = doc.get("holdOnly") or []
    if not isinstance(hold_only, Sequence) or isinstance(hold_only, str):
        raise ConfigError(f"{key}.holdOnly: want a list of the rule's terms, got {hold_only!r}")
    for t in hold_only:
        if not isinstance(t, str) or t not in known:
            raise ConfigError(f"{key}.holdOnly: {t!r} is not one of the rule's terms")
    return Pressure(
        terms, classes, tuple(services), label, class_label, trend, tuple(capacities), step,
        guard, tuple(dict.fromkeys(hold_only)),
    )  # fmt: skip


def _guard(doc: Any, key: str) -> Guard:
    """The `guard:` mapping of an slo-pressure rule (metrics_adapter.guard)."""
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{key}: want a mapping (replicas, rate, window, fraction)")
    _no_unknown_keys(doc, _GUARD_KEYS, key)
    refs = []
    for k in ("replicas", "rate"):
        v = doc.get(k)
        if not isinstance(v, str) or not _METRIC_NAME.match(v):
            raise ConfigError(f"{key}.{k}: want a rule name, got {v!r}")
        refs.append(v)
    window = parse_duration(doc.get("window", WINDOW_S), f"{key}.window")
    if not 0 < window <= MAX_WINDOW_S:
        raise ConfigError(f"{key}.window: want more than 0 s and at most {MAX_WINDOW_S:g} s")
    fraction = _positive(doc.get("fraction", FRACTION), f"{key}.fraction", 1.0)
    return Guard(replicas=refs[0], rate=refs[1], window_s=window, fraction=fraction)


def _step(doc: Any, key: str) -> Step:
    """The `step:` mapping of an slo-pressure rule (metrics_adapter.step)."""
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{key}: want a mapping (terms, replicas, pods, minRatio, hold)")
    _no_unknown_keys(doc, _STEP_KEYS, key)
    terms = doc.get("terms")
    if (
        not isinstance(terms, Sequence)
        or isinstance(terms, str)
        or not terms
        or len(terms) > MAX_PRESSURE_TERMS
    ):
        raise ConfigError(f"{key}.terms: want a list of 1 to {MAX_PRESSURE_TERMS} term names")
    for t in terms:
        if not isinstance(t, str) or not _METRIC_NAME.match(t):
            raise ConfigError(f"{key}.terms: {t!r} is not a rule name")
    replicas = doc.get("replicas")
    if not isinstance(replicas, str) or not _METRIC_NAME.match(replicas):
        raise ConfigError(f"{key}.replicas: want a rule name, got {replicas!r}")
    pods = doc.get("pods", PODS)
    if isinstance(pods, bool) or not isinstance(pods, int) or not 1 <= pods <= MAX_STEP_PODS:
        raise ConfigError(f"{key}.pods: want a whole number in [1, {MAX_STEP_PODS}], got {pods!r}")
    ratio = doc.get("minRatio", MIN_RATIO)
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 1 < ratio <= 2:
        raise ConfigError(f"{key}.minRatio: want a number in (1, 2], got {ratio!r}")
    hold = doc.get("hold", HOLD)
    own = dict(hold) if isinstance(hold, Mapping) else {}
    if own:
        hold = HOLD
    for where, h in [(f"{key}.hold", hold)] + [(f"{key}.hold.{t}", v) for t, v in own.items()]:
        if isinstance(h, bool) or not isinstance(h, int | float) or not 0 <= h <= 1:
            raise ConfigError(f"{where}: want a number in [0, 1] (or term: number), got {h!r}")
    for t in own:
        if t not in terms:
            raise ConfigError(f"{key}.hold.{t}: not one of step.terms")
    holds = tuple((str(t), float(v)) for t, v in own.items())
    return Step(tuple(dict.fromkeys(terms)), replicas, pods, float(ratio), float(hold), holds)


def _positive(value: Any, key: str, most: float = math.inf) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= most
    ):
        raise ConfigError(f"{key}: want a number > 0 and <= {most:g}, got {value!r}")
    return float(value)


def _no_unknown_keys(doc: Mapping[str, Any], known: set[str], key: str) -> None:
    unknown = sorted(set(map(str, doc)) - known)
    if unknown:
        raise ConfigError(f"{key}.{unknown[0]}: unknown key (known: {', '.join(sorted(known))})")


def _trend(doc: Any, key: str) -> Trend:
    """The `trend:` mapping of an slo-pressure rule (metrics_adapter.trend)."""
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{key}: want a mapping (short, long, replicas, lead, capacity)")
    _no_unknown_keys(doc, _TREND_KEYS, key)
    refs = []
    for k in ("short", "long", "replicas"):
        v = doc.get(k)
        if not isinstance(v, str) or not _METRIC_NAME.match(v):
            raise ConfigError(f"{key}.{k}: want a rule name, got {v!r}")
        refs.append(v)
    lead = parse_duration(doc.get("lead", 120.0), f"{key}.lead")
    if lead > MAX_LEAD_S:
        raise ConfigError(f"{key}.lead: at most {MAX_LEAD_S:g} s, got {lead:g}")
    min_rise = doc.get("minRise", 0.1)
    if (
        isinstance(min_rise, bool)
        or not isinstance(min_rise, int | float)
        or not 0 <= min_rise < 10
    ):
        raise ConfigError(f"{key}.minRise: want a number in [0, 10), got {min_rise!r}")
    growth = _positive(doc.get("maxGrowth", 2.0), f"{key}.maxGrowth", MAX_GROWTH)
    if growth < 1:
        raise ConfigError(f"{key}.maxGrowth: want a number >= 1, got {growth:g}")
    return Trend(
        short=refs[0],
        long=refs[1],
        replicas=refs[2],
        lead_s=lead,
        capacity=_positive(doc.get("capacity", 2.0), f"{key}.capacity"),
        max_growth=growth,
        min_rise=float(min_rise),
    )


def _rule(doc: Any, key: str, defaults: Mapping[str, float]) -> Rule:
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{key}: want a mapping, got {doc!r}")
    _no_unknown_keys(doc, _RULE_KEYS, key)
    name = doc.get("name")
    if not isinstance(name, str) or not _METRIC_NAME.match(name):
        shown = name if not isinstance(name, str) or len(name) <= 60 else f"{name[:40]}..."
        raise ConfigError(
            f"{key}.name: {shown!r} is not a valid metric name (1 to 253 characters of"
            " [A-Za-z0-9_.:-], the first a letter or digit)"
        )
    if doc.get("aggregation") == "slo-pressure":
        return Rule(
            name=name,
            aggregation="slo-pressure",
            source="rules",
            window=parse_duration(doc.get("window", defaults["window"]), f"{key}.window"),
            staleness=parse_duration(
                doc.get("staleness", defaults["staleness"]), f"{key}.staleness"
            ),
            pressure=_pressure(doc, key),
        )
    for k in ("terms", "classes", "services", "serviceLabel", "classLabel", "trend", "step",
              "guard"):  # fmt: skip
        if k in doc:
            raise ConfigError(f"{key}.{k}: only aggregation slo-pressure takes {k}")
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
        if metric is not None:
            raise ConfigError(
                f"{key}.metric: a promql rule reads its query, not an OTel metric (the query"
                " names its series); remove metric, or make it an otlp rule"
            )
        if agg not in ("last", "quantile"):
            raise ConfigError(
                f"{key}.aggregation: a promql rule computes its value in the query "
                "(aggregation: last, the default) or returns bucket rates by `le` "
                f"(aggregation: quantile), got {agg!r}"
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
    elif agg == "over-ratio":
        if thr is None:
            raise ConfigError(
                f"{key}.threshold: an over-ratio rule needs a threshold (a bucket bound of "
                "its histogram, e.g. 0.05)"
            )
        thr = parse_duration(thr, f"{key}.threshold")
    elif thr is not None:
        raise ConfigError(
            f"{key}.threshold: only aggregations good-rate and over-ratio take a threshold"
        )
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
        threshold=thr if agg in ("good-rate", "over-ratio") else None,
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
    by_name = {r.name: r for r in out}
    for i, r in enumerate(out):
        for term, _ in r.pressure.terms if r.pressure else ():
            if term not in by_name:
                raise ConfigError(f"{key}[{i}].terms.{term}: no rule of that name")
            if by_name[term].aggregation == "slo-pressure":
                raise ConfigError(f"{key}[{i}].terms.{term}: a term cannot be a pressure rule")
        trend = r.pressure.trend if r.pressure else None
        if trend is not None:
            for k, ref in (
                ("short", trend.short),
                ("long", trend.long),
                ("replicas", trend.replicas),
            ):
                if ref not in by_name:
                    raise ConfigError(f"{key}[{i}].trend.{k}: no rule named {ref!r}")
                ref_rule = by_name[ref]
                if (
                    k != "replicas"
                    and ref_rule.aggregation != "rate"
                    and ref_rule.source != "promql"
                ):
                    raise ConfigError(f"{key}[{i}].trend.{k}: {ref!r} is not a rate rule")
                if by_name[ref].aggregation == "slo-pressure":
                    raise ConfigError(f"{key}[{i}].trend.{k}: cannot be a pressure rule")
            if by_name[trend.long].window <= by_name[trend.short].window:
                raise ConfigError(
                    f"{key}[{i}].trend.long: {trend.long!r} needs a longer window than "
                    f"{trend.short!r} ({by_name[trend.short].window:g} s)"
                )
        step = r.pressure.step if r.pressure else None
        if step is not None:
            if step.replicas not in by_name:
                raise ConfigError(f"{key}[{i}].step.replicas: no rule named {step.replicas!r}")
            if by_name[step.replicas].aggregation == "slo-pressure":
                raise ConfigError(f"{key}[{i}].step.replicas: cannot be a pressure rule")
        guard = r.pressure.guard if r.pressure else None
        if guard is not None:
            for k, ref in (("replicas", guard.replicas), ("rate", guard.rate)):
                if ref not in by_name:
                    raise ConfigError(f"{key}[{i}].guard.{k}: no rule named {ref!r}")
                if by_name[ref].aggregation == "slo-pressure":
                    raise ConfigError(f"{key}[{i}].guard.{k}: cannot be a pressure rule")
            ref_rule = by_name[guard.rate]
            if ref_rule.aggregation != "rate" and ref_rule.source != "promql":
                raise ConfigError(f"{key}[{i}].guard.rate: {guard.rate!r} is not a rate rule")
    return tuple(out)


def pressure_rule(
    services: Mapping[str, Mapping[str, Any]] | None = None,
    terms: Sequence[tuple[str, float]] = DEFAULT_PRESSURE_TERMS,
    classes: Sequence[tuple[str, Sequence[tuple[str, float]]]] = DEFAULT_PRESSURE_CLASSES,
    trend: Mapping[str, Any] | None = None,
    step: Mapping[str, Any] | None = None,
    guard: Mapping[str, Any] | bool = True,
    hold_only: Sequence[str] = (),
) -> dict[str, Any]:
    """The `kvspread_slo_pressure` rule as YAML would give it; `services` maps a service to
    `{class: realtime, <term>: target, trendCapacity: ..., ...}`; `trend` (None: off) is
    its `trend:` mapping, see `trend_doc`; `step` (None: off) its `step:`, see `step_doc`;
    `guard` its `guard:` (True: `guard_doc()`, the default rules'; False: off); `hold_only`
    its `holdOnly:` (those of them that are terms). A target `OFF` is written `off`."""

    def yaml(targets: Mapping[str, Any]) -> dict[str, Any]:
        return {t: "off" if v == OFF else v for t, v in targets.items()}

    doc: dict[str, Any] = {
        "name": names.SLI_SLO_PRESSURE,
        "aggregation": "slo-pressure",
        "terms": yaml(dict(terms)),
        "classes": {c: yaml(dict(t)) for c, t in classes},
        "services": {s: yaml(dict(v)) for s, v in (services or {}).items()},
    }
    held = [t for t in hold_only if t in doc["terms"]]
    if held:
        doc["holdOnly"] = held
    if trend is not None:
        doc["trend"] = dict(trend)
    if step is not None:
        doc["step"] = dict(step)
    if guard is not False:
        doc["guard"] = guard_doc() if guard is True else dict(guard)
    return doc


def over_budget_terms(
    share: float = OVER_BUDGET_SHARE,
) -> tuple[tuple[tuple[str, float], ...], tuple[tuple[str, float], ...]]:
    """`OVER_BUDGET_TERMS` with target `share`, for `pressure_rule`: (the terms' additions,
    realtime's 50 ms share on and batch's off; batch's class additions, the other way
    round). Name them under `hold_only` too for the behaviour measured."""
    fast, slow = OVER_BUDGET_TERMS
    return ((fast, share), (slow, OFF)), ((fast, OFF), (slow, share))


def guard_doc(window_s: float = WINDOW_S, fraction: float = FRACTION) -> dict[str, Any]:
    """A `guard:` mapping on the default rules: the engine pods reporting their queue and
    the 1 min request rate."""
    return {
        "replicas": names.SLI_ENGINE_REPLICAS,
        "rate": names.SLI_REQUESTS_PER_SECOND,
        "window": window_s,
        "fraction": fraction,
    }


LATENCY_TERMS: Final = (names.SLI_TTFT_P95, names.SLI_TPOT_P95)
"""The default rules' latency terms, those a `step:` acts on (metrics_adapter.step)."""


def step_doc(
    pods: int = PODS,
    min_ratio: float = MIN_RATIO,
    hold: float = HOLD,
    tpot_hold: float | None = None,
) -> dict[str, Any]:
    """A `step:` mapping on the default rules: TTFT and TPOT p95 step, counted against the
    engine pods reporting their queue; `tpot_hold` (None: `hold`) is TPOT's own hold."""
    holds: float | dict[str, float] = hold
    if tpot_hold is not None and tpot_hold != hold:
        holds = {names.SLI_TTFT_P95: hold, names.SLI_TPOT_P95: tpot_hold}
    return {
        "terms": list(LATENCY_TERMS),
        "replicas": names.SLI_ENGINE_REPLICAS,
        "pods": pods,
        "minRatio": min_ratio,
        "hold": holds,
    }


def trend_doc(lead_s: float, capacity: float = 2.0, max_growth: float = 2.0,
              min_rise: float = 0.1) -> dict[str, Any]:  # fmt: skip
    """A `trend:` mapping on the default rules: the 1 min and 5 min request rates and the
    engine pods reporting their queue."""
    return {
        "short": names.SLI_REQUESTS_PER_SECOND,
        "long": names.SLI_REQUESTS_PER_SECOND_LONG,
        "replicas": names.SLI_ENGINE_REPLICAS,
        "lead": lead_s,
        "capacity": capacity,
        "maxGrowth": max_growth,
        "minRise": min_rise,
    }


def default_rules(
    window: float = DEFAULT_WINDOW_S,
    staleness: float = DEFAULT_STALENESS_S,
    good_threshold: float = DEFAULT_GOOD_THRESHOLD_S,
    pressure: Mapping[str, Any] | None = None,
) -> tuple[Rule, ...]:
    """The SLIs of docs/design.md section 6, from the collector's metric names (kvspread.names);
    `pressure` replaces the default `kvspread_slo_pressure` rule (see `pressure_rule`)."""
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
        {
            "name": names.SLI_QUEUE_DEPTH_PER_REPLICA,
            "metric": names.ENGINE_REQUESTS_WAITING.name,
            "aggregation": "last",
            "combine": "mean",
        },
        {
            "name": names.SLI_REQUESTS_PER_SECOND_LONG,
            "metric": dur,
            "aggregation": "rate",
            "window": TREND_LONG_WINDOWS * window,
        },
        {
            "name": names.SLI_ENGINE_REPLICAS,
            "metric": names.ENGINE_REQUESTS_WAITING.name,
            "aggregation": "last",
            "combine": "count",
            "staleness": 30.0,
        },
        *(
            {
                "name": name,
                "metric": names.GEN_AI_SERVER_NORMALIZED_LATENCY.name,
                "aggregation": "over-ratio",
                "threshold": budget,
                "window": OVER_BUDGET_WINDOWS * window,
            }
            for name, budget in (
                (names.SLI_OVER_50MS_PER_TOKEN, 0.05),
                (names.SLI_OVER_120MS_PER_TOKEN, 0.12),
            )
        ),
        dict(pressure) if pressure is not None else pressure_rule(),
    ]
    return parse_rules(docs, window, staleness, key="default_rules")
