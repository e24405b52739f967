"""Grafana dashboards for kvspread, built with the Grafana Foundation SDK.

Seven dashboards, one concern each: SLO overview, GPU and KV cache, scheduling, autoscaling,
network, collector health, the endpoint picker. Every query reads a metric from
`observability.catalog` or a series recorded by `observability.rules`, filtered by the
template variables `namespace`, `service`, `modality` and `node` (multi-select, "All" =
`.*`; the picker's metrics carry none of them). `build_all()` returns the
dashboard JSON by file name; `panel_queries()` lists every query for the tests that run
them against a real Prometheus.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import (
    heatmap,
    prometheus,
    stat,
    statetimeline,
    table,
    timeseries,
)
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import heatmap as hm
from grafana_foundation_sdk.models import prometheus as pm

from kvspread import names
from observability import catalog as c
from observability import rules as r

__all__ = ["build_all", "panel_queries", "PanelQuery", "UID_PREFIX"]

UID_PREFIX: Final = "kvspread-"
DS: Final = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
TAGS: Final = ["kvspread"]

HTTP: Final = r.HTTP
TTFB: Final = names.HTTP_SERVER_TIME_TO_FIRST_BYTE.prometheus
TTFT: Final = names.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN.prometheus
TPOT: Final = names.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN.prometheus
GPU_USED: Final = names.GPU_MEMORY_USED.prometheus
GPU_TOTAL: Final = names.GPU_MEMORY_TOTAL.prometheus
GPU_UTIL: Final = names.GPU_UTILIZATION.prometheus
KV: Final = names.KV_CACHE_USAGE.prometheus
RUNNING: Final = names.ENGINE_REQUESTS_RUNNING.prometheus
WAITING: Final = names.ENGINE_REQUESTS_WAITING.prometheus
RHO: Final = names.NODE_FRAGMENTATION.prometheus
EXTENT: Final = names.NODE_LARGEST_FREE_EXTENT.prometheus
STREAMS: Final = names.NODE_ACTIVE_STREAMS.prometheus
IMAGE_SHARE: Final = names.NODE_IMAGE_TOKEN_SHARE.prometheus
RTT: Final = names.TCP_RTT.prometheus
RETRANS: Final = names.TCP_RETRANSMITS.prometheus
ACCEPT_DELAY: Final = names.ACCEPT_QUEUE_DELAY.prometheus
BACKLOG: Final = names.ACCEPT_QUEUE_BACKLOG.prometheus
EDGES: Final = names.CONNECTION_EDGES.prometheus
SOURCE_UP: Final = names.COLLECTOR_SOURCE_UP.prometheus
BPF_EVENTS: Final = names.COLLECTOR_EVENTS.prometheus
DROPPED: Final = names.COLLECTOR_DROPPED.prometheus

# Selectors built from the template variables.
SVC: Final = f'{c.NAMESPACE}=~"$namespace", {c.SERVICE}=~"$service", {c.MODALITY}=~"$modality"'
NS: Final = f'{c.NAMESPACE}=~"$namespace"'
NODE_SEL: Final = f'{c.NODE_FROM_SCRAPE}=~"$node"'
GPU_DEVICE_SEL: Final = f'{NODE_SEL},{c.GPU_MEMORY_OWNER}=""'
"""kvspread_gpu_memory_used_bytes of the GPU itself, not its per-pod breakdown."""
RI: Final = "$__rate_interval"
LEGEND_SVC: Final = "{{service_name}} {{llm_modality}}"


# --- small builders -------------------------------------------------------------------------


def _q(expr: str, legend: str = "", ref: str = "A", instant: bool = False) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DS)
    if legend:
        q = q.legend_format(legend)
    return q.instant() if instant else q.range()


def _thresholds(*steps: tuple[float | None, str]) -> db.ThresholdsConfig:
    return (
        db.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(value=v, color=col) for v, col in steps])
    )


def _refs(queries: tuple[tuple[str, str], ...]) -> list[Builder[Any]]:
    return [_q(e, legend, ref=chr(ord("A") + i)) for i, (e, legend) in enumerate(queries)]


def _ts(
    title: str,
    description: str,
    unit: str,
    *queries: tuple[str, str],
    thresholds: db.ThresholdsConfig | None = None,
    minmax: tuple[float | None, float | None] = (None, None),
    width: int = 12,
    stacked: bool = False,
    bars: bool = False,
) -> timeseries.Panel:
    p = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .span(width)
        .height(8)
        .targets(_refs(queries))
        .legend(
            cb.VizLegendOptions()
            .display_mode(cm.LegendDisplayMode.TABLE)
            .placement(cm.LegendPlacement.BOTTOM)
            .show_legend(True)
            .calcs(["mean", "max", "lastNotNull"])
        )
    )
    if minmax[0] is not None:
        p = p.min(minmax[0])
    if minmax[1] is not None:
        p = p.max(minmax[1])
    if thresholds is not None:
        p = p.thresholds(thresholds).thresholds_style(
            cb.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.DASHED)
        )
    if stacked:
        p = p.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL)).fill_opacity(40)
    if bars:
        p = p.draw_style(cm.GraphDrawStyle.BARS).fill_opacity(60)
    return p


def _share(
    title: str,
    description: str,
    *queries: tuple[str, str],
    thresholds: db.ThresholdsConfig | None = None,
) -> timeseries.Panel:
    """A time series of shares: percent unit on a 0..1 axis."""
    return _ts(title, description, "percentunit", *queries, thresholds=thresholds, minmax=(0, 1))


def _stat(
    title: str,
    description: str,
    unit: str,
    expr: str,
    legend: str = "",
    thresholds: db.ThresholdsConfig | None = None,
    width: int = 6,
) -> stat.Panel:
    p = (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .span(width)
        .height(4)
        .targets([_q(expr, legend)])
        .graph_mode(cm.BigValueGraphMode.AREA)
        .color_mode(cm.BigValueColorMode.VALUE)
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    )
    if thresholds is not None:
        p = p.thresholds(thresholds)
    return p


def _up_timeline(
    title: str, description: str, query: tuple[str, str], words: tuple[str, str], width: int
) -> statetimeline.Panel:
    """A 0/1 gauge over time, 1 shown green as `words[0]`, 0 red as `words[1]`."""
    up, down = words
    mapping = dm.ValueMap(
        options={
            "0": dm.ValueMappingResult(text=down, color="red", index=0),
            "1": dm.ValueMappingResult(text=up, color="green", index=1),
        }
    )
    return (
        statetimeline.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .span(width)
        .height(8)
        .targets([_q(*query)])
        .mappings([mapping])
        .thresholds(_thresholds(*UP_THRESHOLDS))
    )


def _variables(*which: str) -> list[Builder[Any]]:
    """Template variables; `service` and `modality` follow `namespace`."""
    out: list[Builder[Any]] = [
        db.DatasourceVariable("datasource").label("Data source").type("prometheus")
    ]
    count = f"{HTTP}_count"
    queries = {
        "namespace": f"label_values({count}, {c.NAMESPACE})",
        "service": f"label_values({count}{{{NS}}}, {c.SERVICE})",
        "modality": f'label_values({count}{{{NS}, {c.SERVICE}=~"$service"}}, {c.MODALITY})',
        "node": f"label_values({SOURCE_UP}, {c.NODE_FROM_SCRAPE})",
        "hpa": 'label_values(kube_horizontalpodautoscaler_status_current_replicas{namespace=~"$namespace"}, horizontalpodautoscaler)',
    }
    labels = {
        "namespace": "Namespace",
        "service": "Service",
        "modality": "Modality",
        "node": "Node",
        "hpa": "HPA",
    }
    for name in which:
        out.append(
            db.QueryVariable(name)
            .label(labels[name])
            .datasource(DS)
            .query({"query": queries[name], "refId": f"var-{name}"})
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dm.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
            .current(dm.VariableOption(selected=True, text="All", value="$__all"))
        )
    return out


def _dashboard(
    uid: str,
    title: str,
    description: str,
    variables: list[Builder[Any]],
    panels: list[db.Row | Builder[dm.Panel]],
) -> db.Dashboard:
    """A dashboard and its panels in order, each `db.Row` starting a (collapsible) row."""
    d = (
        db.Dashboard(title)
        .uid(UID_PREFIX + uid)
        .description(description)
        .tags(TAGS)
        .editable()
        .refresh("30s")
        .time("now-3h", "now")
        .timezone("browser")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .variables(variables)
        .link(
            db.DashboardLink("kvspread dashboards")
            .type(dm.DashboardLinkType.DASHBOARDS)
            .tags(TAGS)
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
    )
    for p in panels:
        d = d.with_row(p) if isinstance(p, db.Row) else d.with_panel(p)
    return d


def _hq(q: float, series: str, by: str, sel: str) -> str:
    return f"histogram_quantile({q}, sum by (le, {by}) (rate({series}_bucket{{{sel}}}[{RI}])))"


def _quantiles(
    series: str, by: str, sel: str, legend: str, *qs: float
) -> tuple[tuple[str, str], ...]:
    """One query per quantile of a histogram, legends suffixed p50, p95, ..."""
    return tuple((_hq(q, series, by, sel), f"{legend} p{q * 100:g}") for q in qs)


# --- the dashboards -------------------------------------------------------------------------

BUDGET_THRESHOLDS: Final = ((None, "red"), (0, "orange"), (0.25, "green"))
"""Share of an error budget left: red once spent, orange under a quarter."""
FULL_THRESHOLDS: Final = ((None, "green"), (0.9, "orange"), (0.97, "red"))
"""GPU memory and KV cache used share: engines preempt or fail requests near full."""
UP_THRESHOLDS: Final = ((None, "red"), (1, "green"))
"""A 0/1 up or synced gauge."""
LAT_THRESHOLDS: Final = (
    (None, "green"),
    (r.LATENCY_SLOS[0].threshold_s, "orange"),
    (r.LATENCY_SLOS[1].threshold_s, "red"),
)


def slo_overview() -> db.Dashboard:
    err_budget = 1 - r.ERROR_OBJECTIVE
    by = f"{c.NAMESPACE}, {c.SERVICE}, {c.MODALITY}"
    return _dashboard(
        "slo",
        "kvspread / SLO overview",
        "Request rate, latency, errors and error budgets per service and modality, from the "
        "collector's eBPF-measured http.server.request.duration and the kvspread SLI rules.",
        _variables("namespace", "service", "modality"),
        [
            db.Row("Now"),
            _stat(
                "Requests per second",
                "All selected services, 5-minute rate.",
                "reqps",
                f"sum(kvspread:http_requests:rate5m{{{SVC}}})",
            ),
            _stat(
                "Error ratio",
                f"5xx over all requests, 5-minute window. The availability objective is "
                f"{r.ERROR_OBJECTIVE * 100:g} %.",
                "percentunit",
                f"sum(kvspread:http_errors:rate5m{{{SVC}}}) / sum(kvspread:http_requests:rate5m{{{SVC}}})",
                thresholds=_thresholds(
                    (None, "green"), (err_budget, "orange"), (err_budget * 14.4, "red")
                ),
            ),
            _stat(
                "Availability budget remaining (30 d)",
                "Worst service: share of the 30-day error budget still unspent. Below 0 the SLO "
                "is missed.",
                "percentunit",
                f'min(kvspread:error_budget_remaining:ratio30d{{slo="availability", {SVC}}})',
                thresholds=_thresholds(*BUDGET_THRESHOLDS),
            ),
            _stat(
                "Latency budget remaining (30 d)",
                "Worst service and class: share of the 30-day latency budget still unspent.",
                "percentunit",
                f'min(kvspread:error_budget_remaining:ratio30d{{slo=~"latency-.*", {SVC}}})',
                thresholds=_thresholds(*BUDGET_THRESHOLDS),
            ),
            db.Row("Traffic and latency"),
            _ts(
                "Request rate by service and modality",
                "Requests per second (5-minute rate) measured server-side by eBPF.",
                "reqps",
                (f"sum by ({by}) (kvspread:http_requests:rate5m{{{SVC}}})", LEGEND_SVC),
            ),
            _ts(
                "Latency p50 / p95 / p99",
                "Request duration quantiles from the histogram buckets (linear interpolation). "
                "Dashed lines: realtime 50 ms and batch 120 ms class thresholds.",
                "s",
                *_quantiles(HTTP, by, SVC, LEGEND_SVC, 0.5, 0.95, 0.99),
                thresholds=_thresholds(*LAT_THRESHOLDS),
            ),
            _ts(
                "Time to first byte p95",
                "First request byte read to first response byte written: the prefill part of "
                "a streamed answer.",
                "s",
                (_hq(0.95, TTFB, by, SVC), LEGEND_SVC),
                thresholds=_thresholds(*LAT_THRESHOLDS),
            ),
            _ts(
                "Time to first token p95 (token streams)",
                "SSE responses: last request byte read to the first data event written. Dashed "
                "line: the 1 s time-to-first-token objective.",
                "s",
                (_hq(0.95, TTFT, by, SVC), LEGEND_SVC),
                thresholds=_thresholds((None, "green"), (1.0, "red")),
            ),
            _ts(
                "Time per output token p50 / p95 (token streams)",
                "SSE responses: mean time between data events after the first (inter-token "
                "latency, the decode speed users see).",
                "s",
                *_quantiles(TPOT, by, SVC, LEGEND_SVC, 0.5, 0.95),
            ),
            _ts(
                "Error ratio",
                "5xx over all requests (5-minute window) per service and modality.",
                "percentunit",
                (f"sum by ({by}) (kvspread:http_errors:ratio_rate5m{{{SVC}}})", LEGEND_SVC),
                thresholds=_thresholds((None, "green"), (err_budget, "red")),
                minmax=(0, None),
            ),
            db.Row("SLOs"),
            _share(
                "Token streams within each QoS class's per-token budget",
                "Share of token streams whose duration / output tokens is within each class "
                "budget (realtime 50 ms, batch 120 ms), 5-minute window: the SLO attainment; "
                "the dashed line is the 99 % objective.",
                (
                    f"kvspread:gen_ai_streams_within_budget:ratio_rate5m{{{SVC}}}",
                    LEGEND_SVC + " < {{slo_class}}",
                ),
                thresholds=_thresholds((None, "red"), (r.LATENCY_SLOS[0].objective, "green")),
            ),
            _ts(
                "Error budget remaining (30 d)",
                "Per service and SLO: 1 - (bad share over 30 days) / (allowed bad share). "
                "Availability counts 5xx; latency SLOs count token streams over the class "
                "budget per output token (pods labelled kvspread.io/qos=realtime against 50 ms, "
                "others against 120 ms).",
                "percentunit",
                (
                    f"kvspread:error_budget_remaining:ratio30d{{{SVC}}}",
                    LEGEND_SVC + " {{slo}}",
                ),
                thresholds=_thresholds(*BUDGET_THRESHOLDS),
            ),
            _ts(
                "Error budget burn rate (1 h)",
                "Error ratio over 1 hour divided by the allowed ratio. Pages at 14.4 (1 h and "
                "5 m), and at 6 (6 h and 30 m); see docs/runbooks.md.",
                "none",
                (
                    f"sum by ({by}) (kvspread:http_errors:ratio_rate1h{{{SVC}}}) / {err_budget:.6g}",
                    LEGEND_SVC,
                ),
                thresholds=_thresholds((None, "green"), (6, "orange"), (14.4, "red")),
                minmax=(0, None),
            ),
        ],
    )


def gpu_kv() -> db.Dashboard:
    gpu_legend = "{{node}} GPU {{gpu_index}}"
    kv_sel = f"{NS}, {NODE_SEL}"
    inst = "{{k8s_namespace_name}}/{{k8s_pod_name}} ({{llm_engine}})"
    return _dashboard(
        "gpu",
        "kvspread / GPU and KV cache",
        "GPU memory per node and GPU (NVML), KV-cache usage per engine instance, and the "
        "node fragmentation the scheduler extender acts on. Absent on nodes without a GPU "
        "driver: the collector reports GPU metrics absent, never zero.",
        _variables("namespace", "node"),
        [
            db.Row("GPU memory"),
            _ts(
                "GPU memory used",
                "Per node and GPU (NVML).",
                "bytes",
                (f"{GPU_USED}{{{GPU_DEVICE_SEL}}}", gpu_legend),
            ),
            _ts(
                "GPU memory per pod",
                "Shared GPUs (time-slicing, MPS): each pod's processes on each GPU (NVML "
                "per-process memory, pid -> cgroup -> pod); no_pod is processes in no pod.",
                "bytes",
                (
                    f'{GPU_USED}{{{NODE_SEL},{c.GPU_MEMORY_OWNER}!=""}}',
                    "{{node}} GPU {{gpu_index}} {{k8s_namespace_name}}/{{k8s_pod_name}}"
                    f" {{{{{c.GPU_MEMORY_OWNER}}}}}",
                ),
                stacked=True,
            ),
            _share(
                "GPU memory used share",
                "Used over total per GPU.",
                (f"{GPU_USED}{{{GPU_DEVICE_SEL}}} / {GPU_TOTAL}{{{NODE_SEL}}}", gpu_legend),
                thresholds=_thresholds(*FULL_THRESHOLDS),
            ),
            _share(
                "GPU utilisation",
                "Share of time a kernel ran (NVML).",
                (f"{GPU_UTIL}{{{NODE_SEL}}}", gpu_legend),
            ),
            _ts(
                "Largest free extent",
                "max over the node's GPUs of free memory: the biggest instance that fits on one "
                "GPU now.",
                "bytes",
                (f"{EXTENT}{{{NODE_SEL}}}", "{{node}}"),
            ),
            db.Row("Fragmentation"),
            heatmap.Panel()
            .title("Node fragmentation rho over time")
            .description(
                "rho = 1 - max_g(free_g) / sum_g(free_g) per node (rows), over time (columns). "
                "0: all free memory on one GPU; above 0.35 the extender repels replicas harder."
            )
            .datasource(DS)
            .span(24)
            .height(10)
            .targets([_q(f"{RHO}{{{NODE_SEL}}}", "{{node}}")])
            .calculate(False)
            .color(
                heatmap.HeatmapColorOptions()
                .mode(hm.HeatmapColorMode.SCHEME)
                .scheme("RdYlGn")
                .reverse(True)
                .min(0)
                .max(1)
                .fill("dark-orange")
                .scale(hm.HeatmapColorScale.LINEAR)
                .exponent(0.5)
                .steps(64)
            )
            .rows_frame(heatmap.RowsHeatmapOptions().layout(cm.HeatmapCellLayout.UNKNOWN))
            .cell_values(heatmap.CellValues().unit("percentunit").decimals(2))
            .y_axis(heatmap.YAxisConfig().axis_placement(cm.AxisPlacement.LEFT))
            .show_legend(),
            _share(
                "Node fragmentation rho",
                "The same values as lines, with the 0.35 repulsion threshold.",
                (f"{RHO}{{{NODE_SEL}}}", "{{node}}"),
                thresholds=_thresholds((None, "green"), (0.35, "orange")),
            ),
            _ts(
                "Active streams and image-token share",
                "Load inputs of the extender: requests in flight per node, and the share of image "
                "tokens in recent traffic.",
                "short",
                (f"{STREAMS}{{{NODE_SEL}}}", "{{node}} streams"),
                (f"{IMAGE_SHARE}{{{NODE_SEL}}}", "{{node}} image share"),
            ),
            db.Row("KV cache and engine queues"),
            _share(
                "KV-cache usage per engine instance",
                "From each engine's own metrics (vLLM kv_cache_usage_perc, SGLang token_usage, "
                "TensorRT-LLM block metrics). Engines preempt or fail requests near 100 %.",
                (f"{KV}{{{kv_sel}}}", inst),
                thresholds=_thresholds(*FULL_THRESHOLDS),
            ),
            _ts(
                "Engine requests running and waiting",
                "Running batch and queue depth per engine instance.",
                "short",
                (f"{RUNNING}{{{kv_sel}}}", inst + " running"),
                (f"{WAITING}{{{kv_sel}}}", inst + " waiting"),
            ),
        ],
    )


def scheduling() -> db.Dashboard:
    dur = names.EXTENDER_REQUEST_DURATION.prometheus
    return _dashboard(
        "scheduling",
        "kvspread / Scheduling",
        "The kube-scheduler extender: latency per verb, decisions, filter reasons, node-signal "
        "freshness and the prioritize terms.",
        _variables(),
        [
            db.Row("Extender"),
            _ts(
                "Requests by verb and code",
                "Calls from kube-scheduler per second.",
                "reqps",
                (
                    f"sum by (verb, code) (rate({names.EXTENDER_REQUESTS.prometheus}[{RI}]))",
                    "{{verb}} {{code}}",
                ),
            ),
            _ts(
                "Latency per verb p50 / p99",
                "Body read to response written. The scheduler waits on this for every pod; the "
                "KvspreadExtenderSlow alert fires at p99 > 250 ms.",
                "s",
                *_quantiles(dur, "verb", "", "{{verb}}", 0.5, 0.99),
                thresholds=_thresholds((None, "green"), (0.25, "red")),
            ),
            _ts(
                "Decisions",
                "Filter and prioritize calls per second by outcome (filter: passed, no_fit, "
                "invalid_pod; prioritize: placed, no_fit, no_gpu, invalid_pod).",
                "ops",
                (
                    f"sum by (outcome) (rate({names.EXTENDER_FILTER_DECISIONS.prometheus}[{RI}]))",
                    "filter {{outcome}}",
                ),
                (
                    f"sum by (outcome) (rate({names.EXTENDER_PRIORITIZE_DECISIONS.prometheus}[{RI}]))",
                    "prioritize {{outcome}}",
                ),
                stacked=True,
            ),
            _ts(
                "Filter failures by reason",
                "Nodes failed by the filter per second, by reason (the text kubectl describe pod "
                "shows comes from the same reasons).",
                "ops",
                (
                    f"sum by (reason) (rate({names.EXTENDER_FILTER_FAILURES.prometheus}[{RI}]))",
                    "{{reason}}",
                ),
                bars=True,
                stacked=True,
            ),
            db.Row("Signals and scores"),
            _ts(
                "Node-signal reads by state",
                "fresh, stale or missing kvspread.io/signals annotations per second. Stale and "
                "missing nodes get a neutral signal score; invalid documents count apart, and "
                "unknown means the node is not in the extender's cache.",
                "ops",
                (f"sum by (state) (rate({names.EXTENDER_SIGNALS.prometheus}[{RI}]))", "{{state}}"),
                stacked=True,
            ),
            _share(
                "Stale or missing signal share",
                "Share of node-signal reads that were stale or missing; the "
                "KvspreadNodeSignalsStale alert fires above 20 %.",
                (
                    f'sum(rate({names.EXTENDER_SIGNALS.prometheus}{{state=~"stale|missing|invalid"}}[{RI}])) '
                    f"/ sum(rate({names.EXTENDER_SIGNALS.prometheus}[{RI}]))",
                    "stale or missing",
                ),
                thresholds=_thresholds((None, "green"), (0.2, "red")),
            ),
            _share(
                "Score terms (median and p90)",
                "Distribution of each prioritize term in [0, 1] over the scored nodes: "
                "fragmentation, load, spread, modality, qos.",
                *_quantiles(names.EXTENDER_SCORE_TERM.prometheus, "term", "", "{{term}}", 0.5, 0.9),
            ),
            _up_timeline(
                "Cache synced",
                "1 once the node or pod cache finished its first list (readyz).",
                (f"{names.EXTENDER_CACHE_SYNCED.prometheus}", "{{instance}} {{resource}}"),
                ("synced", "not synced"),
                width=12,
            ),
        ],
    )


def autoscaling() -> db.Dashboard:
    hpa_sel = 'namespace=~"$namespace", horizontalpodautoscaler=~"$hpa"'
    by = f"{c.NAMESPACE}, {c.SERVICE}, {c.MODALITY}"
    return _dashboard(
        "autoscaling",
        "kvspread / Autoscaling",
        "Per HPA, current and desired replicas (kube-state-metrics) next to the kvspread SLIs "
        "the adapter serves to it, and the adapter's own health.",
        _variables("namespace", "service", "modality", "hpa"),
        [
            db.Row("Replicas and the SLIs they follow"),
            _ts(
                "Replicas: current, desired, max",
                "kube-state-metrics series of each HPA. Desired above current: the controller is "
                "scaling out; desired at max: the SLI cannot be met with more replicas.",
                "short",
                (
                    f"kube_horizontalpodautoscaler_status_current_replicas{{{hpa_sel}}}",
                    "{{horizontalpodautoscaler}} current",
                ),
                (
                    f"kube_horizontalpodautoscaler_status_desired_replicas{{{hpa_sel}}}",
                    "{{horizontalpodautoscaler}} desired",
                ),
                (
                    f"kube_horizontalpodautoscaler_spec_max_replicas{{{hpa_sel}}}",
                    "{{horizontalpodautoscaler}} max",
                ),
            ),
            _ts(
                "p95 latency (kvspread_request_latency_p95_seconds)",
                "The SLI a latency-scaled HPA targets, as Prometheus sees it (the adapter computes "
                "it from the same histogram over its own window).",
                "s",
                (f"kvspread:http_request_duration_seconds:p95_rate5m{{{SVC}}}", LEGEND_SVC),
                thresholds=_thresholds(*LAT_THRESHOLDS),
            ),
            _ts(
                "Good requests per second (< 200 ms)",
                "kvspread_good_requests_per_second as the HPA example uses it: requests faster "
                "than 0.2 s per second.",
                "reqps",
                (
                    f'sum by ({by}) (rate({HTTP}_bucket{{le="0.2", {SVC}}}[{RI}]))',
                    LEGEND_SVC,
                ),
            ),
            _ts(
                "Queue depth and KV-cache usage",
                "kvspread_queue_depth (requests waiting in the engines) and "
                "kvspread_kv_cache_usage_ratio (mean over instances) per namespace.",
                "short",
                (f"sum by ({c.NAMESPACE}) ({WAITING}{{{NS}}})", "{{k8s_namespace_name}} waiting"),
                (f"avg by ({c.NAMESPACE}) ({KV}{{{NS}}})", "{{k8s_namespace_name}} KV usage"),
            ),
            db.Row("Metrics adapter"),
            _ts(
                "External-metrics requests by code",
                "Reads by the HPA controller through the aggregator.",
                "reqps",
                (
                    f"sum by (kind, code) (rate({names.ADAPTER_REQUESTS.prometheus}[{RI}]))",
                    "{{kind}} {{code}}",
                ),
            ),
            _ts(
                "Adapter latency p99",
                "External-metrics request latency.",
                "s",
                (
                    _hq(0.99, names.ADAPTER_REQUEST_DURATION.prometheus, "instance", ""),
                    "{{instance}}",
                ),
            ),
            _ts(
                "Series held and OTLP points",
                "Series in the windowed store and OTLP data points received per second.",
                "short",
                (f"sum by (instance) ({names.ADAPTER_SERIES.prometheus})", "{{instance}} series"),
                (
                    f"sum by (instance) (rate({names.ADAPTER_OTLP_POINTS.prometheus}[{RI}]))",
                    "{{instance}} points/s",
                ),
            ),
            _ts(
                "Stale reads and dropped series",
                "Reads refused because the newest value was too old (the HPA sees the metric "
                "missing), and series evicted by the cap or expired.",
                "ops",
                (
                    f"sum by (instance) (rate({names.ADAPTER_STALE_READS.prometheus}[{RI}]))",
                    "{{instance}} stale",
                ),
                (
                    f"sum by (instance) (rate({names.ADAPTER_SERIES_DROPPED.prometheus}[{RI}]))",
                    "{{instance}} evicted",
                ),
            ),
        ],
    )


def network() -> db.Dashboard:
    sel = f"{NS}, {NODE_SEL}"
    pod = f"{c.NAMESPACE}, {c.POD}"
    port = f"{pod}, {c.PORT}"
    edge_by = f"client_pod, client_address, {c.NAMESPACE}, {c.POD}, {c.PORT}"
    return _dashboard(
        "network",
        "kvspread / Network",
        "TCP round-trip time and retransmits per pod, accept-queue delay (the head-of-line "
        "wait a Service proxy adds) and connection edges, measured by the collector's eBPF "
        "programs.",
        _variables("namespace", "node"),
        [
            db.Row("TCP"),
            _ts(
                "TCP RTT p50 / p99 per pod",
                "Smoothed RTT from tcp:tcp_probe.",
                "s",
                *_quantiles(RTT, pod, sel, "{{k8s_namespace_name}}/{{k8s_pod_name}}", 0.5, 0.99),
            ),
            _ts(
                "TCP retransmits per pod",
                "Retransmitted segments per second (tcp:tcp_retransmit_skb).",
                "pps",
                (
                    f"sum by ({pod}) (rate({RETRANS}{{{sel}}}[{RI}]))",
                    "{{k8s_namespace_name}}/{{k8s_pod_name}}",
                ),
            ),
            db.Row("Accept queue"),
            _ts(
                "Accept-queue delay p50 / p99 per port",
                "Connection established to accept(): time a new connection waits for the server "
                "to take it (head-of-line blocking).",
                "s",
                *_quantiles(ACCEPT_DELAY, port, sel, "{{k8s_pod_name}}:{{server_port}}", 0.5, 0.99),
                thresholds=_thresholds((None, "green"), (0.01, "orange"), (0.1, "red")),
            ),
            _ts(
                "Accept-queue backlog",
                "Connections waiting in the accept queue per listening port.",
                "short",
                (
                    f"{BACKLOG}{{{NODE_SEL}}}",
                    "{{node}} port {{server_port}} (limit {{limit}})",
                ),
            ),
            db.Row("Dependencies"),
            table.Panel()
            .title("Connection edges")
            .description(
                "Accepted connections per second from a client (pod where the collector knows it, "
                "else its address) to a server pod and port over the selected time range: the "
                "service dependency graph."
            )
            .datasource(DS)
            .span(24)
            .height(10)
            .unit("cps")
            .targets(
                [
                    _q(
                        f"sum by ({edge_by}) (rate({EDGES}{{{sel}}}[$__range]))",
                        instant=True,
                    ).format(pm.PromQueryFormat.TABLE)
                ]
            ),
        ],
    )


def collector_health() -> db.Dashboard:
    return _dashboard(
        "collector",
        "kvspread / Collector health",
        "Which collector sources work on each node (bpf, nvml, engine, kubernetes, otlp), "
        "BPF event rates and what was dropped.",
        _variables("node"),
        [
            _up_timeline(
                "Sources up",
                "1 when a source works. A source that is down leaves its signals absent, never "
                "zero; the logs say why once.",
                (f"{SOURCE_UP}{{{NODE_SEL}}}", "{{node}} {{source}}"),
                ("up", "down"),
                width=24,
            ),
            _ts(
                "BPF events per second",
                "Events read from each BPF program.",
                "ops",
                (
                    f"sum by ({c.NODE_FROM_SCRAPE}, program) (rate({BPF_EVENTS}{{{NODE_SEL}}}[{RI}]))",
                    "{{node}} {{program}}",
                ),
            ),
            _ts(
                "Dropped per second",
                "Samples or events dropped: full BPF tables, lost perf events, failed exports.",
                "ops",
                (
                    f"sum by ({c.NODE_FROM_SCRAPE}, reason) (rate({DROPPED}{{{NODE_SEL}}}[{RI}]))",
                    "{{node}} {{reason}}",
                ),
                thresholds=_thresholds((None, "green"), (1, "red")),
            ),
            _ts(
                "Scrape targets up",
                "Prometheus' own view of every kvspread target.",
                "short",
                ('up{job=~".*kvspread.*"}', "{{job}} {{instance}}"),
                minmax=(0, 1),
            ),
        ],
    )


def picker() -> db.Dashboard:
    """The endpoint picker (router/): what it decided, how fast, what it refused and what
    its bounded state holds. Its metrics carry no service labels (one picker serves one
    InferencePool), so the panels sum over the picker replicas Prometheus scrapes."""
    picks = names.ROUTER_PICKS.prometheus
    refusals = (
        (f"sum(rate({names.ROUTER_SHEDS.prometheus}[{RI}]))", "429 every endpoint full"),
        (f"sum(rate({names.ROUTER_BAD_REQUESTS.prometheus}[{RI}]))", "400 unparsable body"),
        (
            f"sum by (code) (rate({names.ROUTER_BODY_REFUSALS.prometheus}[{RI}]))",
            "{{code}} over a body budget",
        ),
    )
    return _dashboard(
        "router",
        "kvspread / Endpoint picker",
        "The Gateway API Inference Extension endpoint picker (kvspread router): picks by "
        "endpoint and reason, decision time, refusals, the body budget and the bounded cache "
        "indexes (docs/router.md).",
        _variables(),
        [
            db.Row("Decisions"),
            _ts(
                "Picks per second by reason",
                "Why each request went where it went: score, context (a bound conversation), "
                "cache, saturated or stale (every endpoint was), no-endpoint (503) and shed (429).",
                "reqps",
                (f"sum by (reason) (rate({picks}[{RI}]))", "{{reason}}"),
                stacked=True,
            ),
            _ts(
                "Picks per second by endpoint",
                "How evenly the picker spreads the load; an endpoint missing here gets no traffic.",
                "reqps",
                (f'sum by (endpoint) (rate({picks}{{endpoint!=""}}[{RI}]))', "{{endpoint}}"),
            ),
            _ts(
                "Decision time p50 / p99",
                "From the complete request body to the decision. Envoy waits on this for every "
                "request (llm-d's picker: 0.90 ms p50 at 10 requests/s).",
                "s",
                *_quantiles(names.ROUTER_PICK_DURATION.prometheus, "job", "", "{{job}}", 0.5, 0.99),
            ),
            _ts(
                "Endpoints and stale endpoints",
                "Endpoints in the set and those whose engine metrics are older than "
                "`metrics.stale_after_s` (scored as full until the next scrape).",
                "short",
                (f"sum({names.ROUTER_ENDPOINTS.prometheus})", "endpoints"),
                (f"sum({names.ROUTER_STALE_ENDPOINTS.prometheus})", "stale"),
            ),
            db.Row("Refusals and the body budget"),
            _ts(
                "Refusals per second",
                "Requests the picker answered itself instead of routing them.",
                "reqps",
                *refusals,
            ),
            _ts(
                "Request body bytes held",
                "Bodies held while they stream in, against `server.max_bodies_bytes`; at the "
                "budget new bodies get 429.",
                "bytes",
                (f"sum by (job) ({names.ROUTER_BODY_HELD.prometheus})", "{{job}}"),
            ),
            _ts(
                "gRPC connections and partial bytes",
                "Connections the h2 server serves (limit `server.max_connections`) and the "
                "partial messages and frames it holds over them (bound "
                "`server.max_bodies_bytes`).",
                "short",
                (
                    f"sum by (job) ({names.ROUTER_GRPC_CONNECTIONS.prometheus})",
                    "{{job}} connections",
                ),
                (
                    f"sum by (job) ({names.ROUTER_GRPC_BUFFERED.prometheus})",
                    "{{job}} partial bytes",
                ),
            ),
            _ts(
                "gRPC server bounds per second",
                "Times a bound of the h2 server acted: connections refused or evicted at the "
                "limit, reads paused for the partial bytes bound, messages not whole in 30 s.",
                "ops",
                (
                    f"sum by (limit) (rate({names.ROUTER_GRPC_LIMITS.prometheus}[{RI}]))",
                    "{{limit}}",
                ),
            ),
            db.Row("Cache indexes"),
            _ts(
                "Prefix index size",
                "The memory estimate of the approximate prefix index, bounded by "
                "`cache.memory_mib`.",
                "bytes",
                (f"sum by (job) ({names.ROUTER_PREFIX_BYTES.prometheus})", "{{job}} bytes"),
            ),
            _ts(
                "Served elsewhere per second",
                "Requests the gateway reported served by another endpoint than the one picked "
                "(a retry down the fallback list); their load moved to the endpoint that served.",
                "reqps",
                (
                    f"sum(rate({names.ROUTER_SERVED_ELSEWHERE.prometheus}[{RI}]))",
                    "served elsewhere",
                ),
            ),
        ],
    )


DASHBOARDS: Final[dict[str, Callable[[], db.Dashboard]]] = {
    "kvspread-slo.json": slo_overview,
    "kvspread-gpu.json": gpu_kv,
    "kvspread-scheduling.json": scheduling,
    "kvspread-autoscaling.json": autoscaling,
    "kvspread-network.json": network,
    "kvspread-collector.json": collector_health,
    "kvspread-router.json": picker,
}


def _to_dict(builder: db.Dashboard) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(json.dumps(builder.build(), cls=JSONEncoder))
    # Grafana assigns ids by position when absent; fix them so diffs stay readable.
    for i, panel in enumerate(_walk(data.get("panels", [])), start=1):
        panel["id"] = i
    return data


def _walk(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for p in panels:
        yield p
        yield from _walk(p.get("panels", []))


def build_all() -> dict[str, dict[str, Any]]:
    """Every dashboard as Grafana JSON, keyed by file name."""
    return {name: _to_dict(make()) for name, make in DASHBOARDS.items()}


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    ref: str
    expr: str


def panel_queries(dashboards: dict[str, dict[str, Any]] | None = None) -> list[PanelQuery]:
    """Every panel target and template-variable query, for tests and reviews."""
    out: list[PanelQuery] = []
    for name, data in (dashboards or build_all()).items():
        for p in _walk(data.get("panels", [])):
            for t in p.get("targets", []) or []:
                out.append(PanelQuery(name, p.get("title", ""), t.get("refId", ""), t["expr"]))
        for v in data.get("templating", {}).get("list", []):
            q = v.get("query")
            if isinstance(q, dict) and "query" in q:
                out.append(PanelQuery(name, f"variable {v['name']}", "var", q["query"]))
    return out
