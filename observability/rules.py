"""Prometheus recording and alerting rules for kvspread, as data.

One source renders two artefacts: a plain rules file (`promtool check rules`, or
`rule_files:` in prometheus.yml) and a `monitoring.coreos.com/v1` PrometheusRule for the
Prometheus Operator.

SLIs (per namespace, service, modality and QoS label) come from the collector: request rate
and error ratio (5xx over all) from its `http.server.request.duration` histogram, and the
share of token streams within each QoS class's budget per output token (realtime 50 ms,
batch 120 ms: duration / output tokens, `kvspread.gen_ai.server.normalized_latency`).

SLO alerts follow the multi-window, multi-burn-rate scheme of the Google SRE workbook
("Alerting on SLOs", table 5-8). A burn rate b means the error budget of a 30-day window
would be spent in 30/b days. An alert needs both a long and a short window above b times the
budget: the long window makes it significant, the short one makes it stop soon after the
problem does.

    severity   long  short  burn  budget spent when it fires
    critical   1h    5m     14.4  2 % of 30 days' budget in 1 hour
    critical   6h    30m    6     5 % in 6 hours
    warning    1d    2h     3     10 % in 1 day
    warning    3d    6h     1     10 % in 3 days
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from kvspread import names
from observability import catalog as c

__all__ = [
    "BurnWindow",
    "LatencySlo",
    "PAGE_WINDOWS",
    "TICKET_WINDOWS",
    "ERROR_OBJECTIVE",
    "LATENCY_SLOS",
    "TTFT_SLO",
    "RUNBOOK_BASE",
    "rule_groups",
    "rules_file",
    "prometheus_rule",
    "alert_names",
    "recorded_names",
]

RUNBOOK_BASE: Final = "https://github.com/kvspread/kvspread/blob/main/docs/runbooks.md"
SLO_PERIOD: Final = "30d"
"""The SLO window the error budget is counted over."""

ERROR_OBJECTIVE: Final = 0.999
"""Availability objective: 99.9 % of requests answer without a 5xx over 30 days."""


@dataclass(frozen=True)
class BurnWindow:
    """One row of the burn-rate table: both windows above `factor` x budget -> alert."""

    long: str
    short: str
    factor: float
    severity: str


PAGE_WINDOWS: Final = (
    BurnWindow("1h", "5m", 14.4, "critical"),
    BurnWindow("6h", "30m", 6, "critical"),
)
TICKET_WINDOWS: Final = (BurnWindow("1d", "2h", 3, "warning"), BurnWindow("3d", "6h", 1, "warning"))
WINDOWS: Final = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")


@dataclass(frozen=True)
class LatencySlo:
    """A latency objective for one QoS class: `objective` of events under `threshold_s`
    (token streams per output token for the class SLOs, first tokens for `TTFT_SLO`).

    `selector` picks the series the class applies to by the `llm_qos` label the collector
    copies from the pod's `kvspread.io/qos`; series without it count as batch.
    """

    qos: str
    threshold_s: float
    objective: float
    selector: str


LATENCY_SLOS: Final = (
    LatencySlo("realtime", 0.05, 0.99, f'{c.QOS}="realtime"'),
    LatencySlo("batch", 0.12, 0.99, f'{c.QOS}!~"realtime|best-effort"'),
)
"""docs/design.md section 2's per-token steps, held by token streams: a stream's duration /
its output tokens (the serving evaluation's per-request SLO) within 50 ms (realtime) or
120 ms (batch). A whole request within 50 ms is no LLM's latency: these thresholds were
applied to `http.server.request.duration` until session 25, so every stream of realtime
pods counted as bad."""

TTFT_SLO: Final = LatencySlo("ttft", 1.0, 0.99, f'{c.QOS}!="best-effort"')
"""Time to first token: 99 % of SSE streams start within 1 s (best-effort pods excluded)."""

HTTP: Final = names.HTTP_SERVER_REQUEST_DURATION.prometheus
TTFT: Final = names.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN.prometheus
TPOT: Final = names.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN.prometheus
NORMALIZED: Final = names.GEN_AI_SERVER_NORMALIZED_LATENCY.prometheus
BY: Final = ", ".join((*c.SERVICE_LABELS, c.QOS))
EXTENDER_DURATION: Final = names.EXTENDER_REQUEST_DURATION.prometheus
COLLECTOR_UP: Final = names.COLLECTOR_SOURCE_UP.prometheus
COLLECTOR_DROPPED: Final = names.COLLECTOR_DROPPED.prometheus


def _le(seconds: float) -> str:
    """The `le` label value Prometheus exporters write for a bucket bound."""
    return repr(float(seconds))


def _record(name: str, expr: str, **labels: str) -> dict[str, Any]:
    """One recording rule; `labels` are the static labels it adds (slo, slo_class)."""
    rule: dict[str, Any] = {"record": name, "expr": expr}
    if labels:
        rule["labels"] = labels
    return rule


def _rate_and_share(part: str, expr: str, total: str, w: str) -> list[dict[str, Any]]:
    """`kvspread:PART:rate{w}` from `expr`, and `kvspread:PART:ratio_rate{w}`, its share of
    `kvspread:TOTAL:rate{w}`."""
    rate = f"kvspread:{part}:rate{w}"
    return [
        _record(rate, expr),
        _record(f"kvspread:{part}:ratio_rate{w}", f"{rate} / kvspread:{total}:rate{w}"),
    ]


def _recording() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for w in WINDOWS:
        total = f"sum by ({BY}) (rate({HTTP}_count[{w}]))"
        rules.append(_record(f"kvspread:http_requests:rate{w}", total))
        # `or 0 * total` keeps a zero error series where no request failed, so that the
        # ratio and the budget panels read 0 rather than nothing.
        errors = f'sum by ({BY}) (rate({HTTP}_count{{{c.STATUS}=~"5.."}}[{w}])) or (0 * {total})'
        rules += _rate_and_share("http_errors", errors, "http_requests", w)
        timed = f"sum by ({BY}) (rate({NORMALIZED}_count[{w}]))"
        rules.append(_record(f"kvspread:gen_ai_streams_timed:rate{w}", timed))
        for slo in LATENCY_SLOS:
            fast = f'sum by ({BY}) (rate({NORMALIZED}_bucket{{le="{_le(slo.threshold_s)}"}}[{w}]))'
            rules.append(
                _record(f"kvspread:gen_ai_streams_within_budget:rate{w}", fast, slo_class=slo.qos)
            )
            ratio = (
                f'kvspread:gen_ai_streams_within_budget:rate{w}{{slo_class="{slo.qos}"}} '
                f"/ ignoring(slo_class) kvspread:gen_ai_streams_timed:rate{w}"
            )
            rules.append(
                _record(
                    f"kvspread:gen_ai_streams_within_budget:ratio_rate{w}", ratio, slo_class=slo.qos
                )
            )
        streams = f"sum by ({BY}) (rate({TTFT}_count[{w}]))"
        rules.append(_record(f"kvspread:gen_ai_streams:rate{w}", streams))
        fast = f'sum by ({BY}) (rate({TTFT}_bucket{{le="{_le(TTFT_SLO.threshold_s)}"}}[{w}]))'
        rules += _rate_and_share("gen_ai_streams_fast_first_token", fast, "gen_ai_streams", w)
    for name, series in (("time_to_first_token", TTFT), ("time_per_output_token", TPOT)):
        rules.append(
            _record(
                f"kvspread:gen_ai_server_{name}_seconds:p95_rate5m",
                f"histogram_quantile(0.95, sum by (le, {BY}) (rate({series}_bucket[5m])))",
            )
        )
    for q in (50, 95, 99):
        rules.append(
            _record(
                f"kvspread:http_request_duration_seconds:p{q}_rate5m",
                f"histogram_quantile(0.{q:02d}, sum by (le, {BY}) (rate({HTTP}_bucket[5m])))",
            )
        )
    return rules


def _budget() -> list[dict[str, Any]]:
    """30-day SLI and budget remaining, from the 5-minute rates (weighted by traffic)."""
    p = SLO_PERIOD
    rules = [
        _record(
            f"kvspread:http_errors:ratio_rate{p}",
            f"sum_over_time(kvspread:http_errors:rate5m[{p}]) "
            f"/ sum_over_time(kvspread:http_requests:rate5m[{p}])",
        ),
        _record(
            f"kvspread:error_budget_remaining:ratio{p}",
            f"1 - kvspread:http_errors:ratio_rate{p} / {1 - ERROR_OBJECTIVE:.6g}",
            slo="availability",
        ),
    ]
    for slo in LATENCY_SLOS:
        fast = (
            f'sum_over_time(kvspread:gen_ai_streams_within_budget:rate5m{{slo_class="{slo.qos}"}}'
            f"[{p}])"
        )
        rules.append(
            _record(
                f"kvspread:gen_ai_streams_within_budget:ratio_rate{p}",
                f"{fast} / ignoring(slo_class) "
                f"sum_over_time(kvspread:gen_ai_streams_timed:rate5m[{p}])",
                slo_class=slo.qos,
            )
        )
        bad = (
            f"1 - kvspread:gen_ai_streams_within_budget:ratio_rate{p}"
            f'{{slo_class="{slo.qos}", {slo.selector}}}'
        )
        rules.append(
            _record(
                f"kvspread:error_budget_remaining:ratio{p}",
                f"1 - ({bad}) / {1 - slo.objective:.6g}",
                slo=f"latency-{slo.qos}",
            )
        )
    return rules


def _runbook(alert: str) -> str:
    return f"{RUNBOOK_BASE}#{alert.lower()}"


def _alert(
    name: str,
    expr: str,
    for_: str,
    severity: str,
    summary: str,
    description: str,
    extra_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, **(extra_labels or {})},
        "annotations": {
            "summary": summary,
            "description": description,
            "runbook_url": _runbook(name),
        },
    }


_WHERE: Final = (
    "{{ $labels.service_name }} in {{ $labels.k8s_namespace_name }} "
    "(modality {{ $labels.llm_modality }})"
)


def _burn_expr(bad: str, windows: tuple[BurnWindow, ...], budget: float) -> str:
    """`bad` is a ratio expression with a `{w}` placeholder for the window."""
    parts = []
    for bw in windows:
        threshold = f"({bw.factor:g} * {budget:.6g})"
        parts.append(
            f"({bad.format(w=bw.long)} > {threshold} and {bad.format(w=bw.short)} > {threshold})"
        )
    return "\n or ".join(parts)


def _burn_pair(
    name: str,
    bad: str,
    budget: float,
    what: str,
    describe: Callable[[tuple[BurnWindow, ...], float], str],
    slo_label: str,
) -> list[dict[str, Any]]:
    """The fast (page) and slow (ticket) burn alerts `Kvspread<name>BudgetFastBurn` /
    `...SlowBurn` of one objective; `describe(windows, budget)` writes the description."""
    return [
        _alert(
            f"Kvspread{name}Budget{kind}Burn",
            _burn_expr(bad, windows, budget),
            for_,
            windows[0].severity,
            f"{_WHERE} is burning its {what} {speed}",
            describe(windows, budget),
            {"slo": slo_label},
        )
        for kind, windows, for_, speed in (
            ("Fast", PAGE_WINDOWS, "2m", "fast"),
            ("Slow", TICKET_WINDOWS, "15m", "slowly"),
        )
    ]


def _slo_alerts() -> list[dict[str, Any]]:
    value = "{{ $value | humanizePercentage }}"
    budget = 1 - ERROR_OBJECTIVE
    alerts = _burn_pair(
        "Error",
        "kvspread:http_errors:ratio_rate{w}",
        budget,
        "error budget",
        lambda ws, b: (
            f"{value} of requests to {_WHERE} failed (5xx) over the last "
            f"{ws[0].long} or {ws[1].long}; the objective allows {b * 100:.3g} %. At this rate "
            "the 30-day error budget runs out early."
        ),
        "availability",
    )
    for slo in LATENCY_SLOS:
        budget = 1 - slo.objective
        bad = (
            f'(1 - kvspread:gen_ai_streams_within_budget:ratio_rate{{w}}{{{{slo_class="{slo.qos}", '
            f"{slo.selector}}}}})"
        )

        def slow(ws: tuple[BurnWindow, ...], b: float, slo: LatencySlo = slo) -> str:
            return (
                f"{value} of token streams from {_WHERE} took longer than "
                f"{slo.threshold_s * 1000:g} ms per output token (the {slo.qos} class budget) "
                f"over the last {ws[0].long} or {ws[1].long}; the objective allows "
                f"{b * 100:.3g} %."
            )

        alerts += _burn_pair(
            "Latency", bad, budget, f"{slo.qos} latency budget", slow, f"latency-{slo.qos}"
        )
    slo = TTFT_SLO
    budget = 1 - slo.objective
    alerts += _burn_pair(
        "Ttft",
        f"(1 - kvspread:gen_ai_streams_fast_first_token:ratio_rate{{w}}{{{{{slo.selector}}}}})",
        budget,
        "time-to-first-token budget",
        lambda ws, b: (
            f"{value} of token streams from {_WHERE} took longer than "
            f"{TTFT_SLO.threshold_s:g} s to their first token over the last {ws[0].long} or "
            f"{ws[1].long}; the objective allows {b * 100:.3g} %."
        ),
        "ttft",
    )
    return alerts


def _component_alerts() -> list[dict[str, Any]]:
    sig = names.EXTENDER_SIGNALS.prometheus
    ext = names.EXTENDER_REQUESTS.prometheus
    ad = names.ADAPTER_REQUESTS.prometheus
    return [
        _alert(
            "KvspreadNodeSignalsStale",
            f'sum by (job) (rate({sig}{{state=~"stale|missing|invalid"}}[10m]))\n'
            f"  / sum by (job) (rate({sig}[10m])) > 0.2",
            "10m",
            "warning",
            "The scheduler extender sees stale or missing node signals",
            "{{ $value | humanizePercentage }} of node-signal reads by {{ $labels.job }} found "
            "the kvspread.io/signals annotation stale, missing or invalid over 10 minutes. Those nodes "
            "get neutral scores, so placement falls back to spreading blindly.",
        ),
        _alert(
            "KvspreadCollectorSourceDown",
            f"{COLLECTOR_UP} == 0",
            "10m",
            "warning",
            "Collector source {{ $labels.source }} is down on {{ $labels.node }}",
            "The kvspread collector on {{ $labels.node }} ({{ $labels.instance }}) "
            "reports its {{ $labels.source }} source down for 10 minutes; the signals that "
            "source feeds are absent (never zero) until it recovers.",
        ),
        _alert(
            "KvspreadCollectorDroppingEvents",
            f"sum by (job, instance) (rate({COLLECTOR_DROPPED}[10m])) > 1",
            "15m",
            "warning",
            "Collector on {{ $labels.instance }} drops events",
            "The collector on {{ $labels.instance }} dropped {{ $value | humanize }} events "
            "or samples per second over 15 minutes (full BPF tables, lost perf events or "
            "failed exports); latency and TCP signals under-count.",
        ),
        _alert(
            "KvspreadExtenderErrors",
            f'sum by (job, verb) (rate({ext}{{code!~"2.."}}[5m]))\n'
            f"  / sum by (job, verb) (rate({ext}[5m])) > 0.01",
            "5m",
            "warning",
            "Scheduler extender {{ $labels.verb }} answers with errors",
            "{{ $value | humanizePercentage }} of {{ $labels.verb }} calls to {{ $labels.job }} "
            "got a non-2xx answer over 5 minutes. The extender is ignorable, so pods still "
            "schedule, but without kvspread's placement.",
        ),
        _alert(
            "KvspreadExtenderSlow",
            f"histogram_quantile(0.99, sum by (job, verb, le) "
            f"(rate({EXTENDER_DURATION}_bucket[5m]))) > 0.25",
            "10m",
            "warning",
            "Scheduler extender {{ $labels.verb }} p99 latency is high",
            "p99 of {{ $labels.verb }} on {{ $labels.job }} is {{ $value | humanizeDuration }} "
            "(threshold 250 ms) over 10 minutes; every pod's scheduling waits on it and the "
            "scheduler drops the extender when its httpTimeout passes.",
        ),
        _alert(
            "KvspreadExtenderCacheNotSynced",
            f"{names.EXTENDER_CACHE_SYNCED.prometheus} == 0",
            "10m",
            "warning",
            "Scheduler extender {{ $labels.instance }} has not synced its {{ $labels.resource }} cache",
            "The extender's {{ $labels.resource }} cache on {{ $labels.instance }} has not "
            "finished its first list for 10 minutes; names-only requests see unknown nodes and "
            "score them neutral.",
        ),
        _alert(
            "KvspreadAdapterNoData",
            f"max by (job, instance) ({names.ADAPTER_SERIES.prometheus}) == 0",
            "10m",
            "warning",
            "Metrics adapter {{ $labels.instance }} holds no series",
            "The external-metrics adapter {{ $labels.instance }} has held no OTLP series for "
            "10 minutes: nothing is pushed to it, so every HPA on kvspread metrics sees them "
            "missing and keeps its current replica count.",
        ),
        _alert(
            "KvspreadAdapterStaleData",
            f"sum by (job) (rate({names.ADAPTER_STALE_READS.prometheus}[10m]))\n"
            f'  / sum by (job) (rate({ad}{{kind="read"}}[10m])) > 0.1',
            "10m",
            "warning",
            "Metrics adapter refuses stale values",
            "{{ $value | humanizePercentage }} of external-metric reads on {{ $labels.job }} "
            "found only values older than the staleness limit over 10 minutes; the HPAs "
            "concerned do not scale.",
        ),
        _alert(
            "KvspreadAdapterErrors",
            f'sum by (job) (rate({ad}{{code=~"5.."}}[5m]))\n'
            f"  / sum by (job) (rate({ad}[5m])) > 0.01",
            "5m",
            "warning",
            "Metrics adapter answers with server errors",
            "{{ $value | humanizePercentage }} of external-metrics requests to {{ $labels.job }} "
            "failed with 5xx over 5 minutes.",
        ),
        _alert(
            "KvspreadComponentDown",
            'up{job=~".*kvspread.*"} == 0',
            "5m",
            "warning",
            "kvspread target {{ $labels.instance }} ({{ $labels.job }}) is down",
            "Prometheus could not scrape {{ $labels.instance }} of {{ $labels.job }} for "
            "5 minutes.",
        ),
    ]


def rule_groups() -> list[dict[str, Any]]:
    """All rule groups, in the order they are written."""
    return [
        {"name": "kvspread-sli.rules", "interval": "30s", "rules": _recording()},
        {"name": "kvspread-slo-budget.rules", "interval": "5m", "rules": _budget()},
        {"name": "kvspread-slo.alerts", "rules": _slo_alerts()},
        {"name": "kvspread-components.alerts", "rules": _component_alerts()},
    ]


def rules_file() -> dict[str, Any]:
    """The plain Prometheus rules file."""
    return {"groups": rule_groups()}


def prometheus_rule(namespace: str = "kvspread") -> dict[str, Any]:
    """The same groups as a Prometheus Operator PrometheusRule."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "kvspread",
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "kvspread",
                "app.kubernetes.io/part-of": "kvspread",
            },
        },
        "spec": {"groups": rule_groups()},
    }


def alert_names() -> list[str]:
    """Every distinct alert name, in order."""
    return _distinct("alert")


def recorded_names() -> list[str]:
    """Every distinct recorded series name, in order."""
    return _distinct("record")


def _distinct(kind: str) -> list[str]:
    seen: list[str] = []
    for g in rule_groups():
        for r in g["rules"]:
            if kind in r and r[kind] not in seen:
                seen.append(r[kind])
    return seen
