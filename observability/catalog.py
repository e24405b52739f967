"""The catalogue of every metric kvspread's dashboards and rules read, with type, unit and
labels, in Prometheus form.

Collector metrics are declared by their OTel name and unit and translated with
`kvspread.names.prometheus_name`, exactly as the collector's exposition does; OTel attribute
names become labels with dots as underscores (`k8s.namespace.name` -> `k8s_namespace_name`).
Self-monitoring metrics of the extender and the adapter are Prometheus names already. The
same catalogue renders docs/metrics.md, so the reference and the queries share one source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from kvspread import names as n

__all__ = ["Metric", "CATALOG", "label", "by_name", "SERVICE_LABELS", "HISTOGRAM_BUCKETS"]

MetricType = Literal["counter", "gauge", "histogram"]


def label(attribute: str) -> str:
    """Prometheus label name of an OTel attribute (the standard translation)."""
    return attribute.replace(".", "_").replace("-", "_")


NAMESPACE: Final = label(n.ATTR_K8S_NAMESPACE)
POD: Final = label(n.ATTR_K8S_POD)
NODE: Final = label(n.ATTR_K8S_NODE)
SERVICE: Final = label(n.ATTR_SERVICE_NAME)
MODALITY: Final = label(n.ATTR_MODALITY)
QOS: Final = label(n.ATTR_QOS)
ROUTE: Final = label(n.ATTR_HTTP_ROUTE)
METHOD: Final = label(n.ATTR_HTTP_METHOD)
STATUS: Final = label(n.ATTR_HTTP_STATUS)
PORT: Final = label(n.ATTR_SERVER_PORT)
GPU_INDEX: Final = label(n.ATTR_GPU_INDEX)
GPU_UUID: Final = label(n.ATTR_GPU_UUID)
ENGINE: Final = label(n.ATTR_ENGINE)
MODEL: Final = label(n.ATTR_MODEL)

NODE_FROM_SCRAPE: Final = "node"
"""The node label the dashboards and alerts filter collector series by. The collector writes
`k8s_node_name` only on node-level series; its ServiceMonitor / PodMonitor
(manifests/collector/monitoring/) copies `__meta_kubernetes_pod_node_name` into `node` on
every series it scrapes, so `node` is the one label all collector series share."""

SERVICE_LABELS: Final = (NAMESPACE, SERVICE, MODALITY)
"""The labels the SLIs are aggregated by: one SLO per namespace, service and modality."""

HISTOGRAM_BUCKETS: Final = n.LATENCY_BUCKETS
"""Bucket bounds the latency histograms carry (kvspread.names.LATENCY_BUCKETS). The SLO rules
read the `le="0.05"` and `le="0.12"` buckets, so an exporter without those bounds makes the
latency SLIs empty, never wrong."""

GEN_AI_OPERATION: Final = n.ATTR_GEN_AI_OPERATION.replace(".", "_")
_HTTP_LABELS: Final = (METHOD, STATUS, ROUTE, PORT, NAMESPACE, POD, MODALITY, SERVICE, QOS)
_POD_PORT: Final = (PORT, NAMESPACE, POD)


@dataclass(frozen=True)
class Metric:
    """One metric as Prometheus sees it.

    `labels` are the labels the exporter writes. Every collector series also carries
    `node`, added by the scrape (NODE_FROM_SCRAPE), plus the usual `job` and `instance`.

    `name` is the family name (a histogram's series add `_bucket`, `_sum`, `_count`);
    `unit` is the UCUM unit of the OTel instrument (or the Prometheus base unit); `source`
    is the component whose /metrics serves it.
    """

    name: str
    type: MetricType
    unit: str
    labels: tuple[str, ...]
    help: str
    source: Literal["collector", "extender", "adapter", "kube-state-metrics"]
    otel_name: str | None = None

    def series(self, suffix: str = "") -> str:
        """The series name to query: `bucket`/`count`/`sum` for histograms."""
        if not suffix:
            return self.name
        if self.type != "histogram":
            raise ValueError(f"{self.name} is a {self.type}; only histograms have _{suffix}")
        return f"{self.name}_{suffix}"


def _otel(
    otel_name: str,
    unit: str,
    kind: MetricType,
    labels: tuple[str, ...],
    help: str,
) -> Metric:
    prom_unit = "" if unit.startswith("{") else unit
    return Metric(
        name=n.prometheus_name(otel_name, prom_unit, kind),
        type=kind,
        unit=unit,
        labels=labels,
        help=help,
        source="collector",
        otel_name=otel_name,
    )


_COLLECTOR: Final = (
    _otel(
        n.HTTP_SERVER_REQUEST_DURATION,
        "s",
        "histogram",
        _HTTP_LABELS,
        "Server-side request duration measured by eBPF, first request byte read to last "
        "response byte written (streamed responses included).",
    ),
    _otel(
        n.HTTP_SERVER_TIME_TO_FIRST_BYTE,
        "s",
        "histogram",
        _HTTP_LABELS,
        "First request byte read to first response byte written.",
    ),
    _otel(
        n.HTTP_SERVER_UNSAMPLED_DURATION,
        "s",
        "histogram",
        _POD_PORT,
        "Requests over bpf.max_requests_per_s (no event to user space): first request byte "
        "read to last response byte written, log2 buckets aggregated in the kernel, so every "
        "request is counted at any rate. Appears once a request went over the budget.",
    ),
    _otel(
        n.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN,
        "s",
        "histogram",
        (*_HTTP_LABELS, GEN_AI_OPERATION),
        "SSE (text/event-stream) responses: last request byte read to the write completing "
        "the first data event (OTel GenAI semconv; eBPF).",
    ),
    _otel(
        n.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN,
        "s",
        "histogram",
        (*_HTTP_LABELS, GEN_AI_OPERATION),
        "SSE responses: (last data event - first) / (data events - 1), data: [DONE] "
        "excluded; streams of one event have none (OTel GenAI semconv; eBPF).",
    ),
    _otel(
        n.GPU_MEMORY_USED,
        "By",
        "gauge",
        (GPU_INDEX, GPU_UUID),
        "GPU memory used (NVML). Absent, never zero, where no driver answers.",
    ),
    _otel(n.GPU_MEMORY_TOTAL, "By", "gauge", (GPU_INDEX, GPU_UUID), "GPU memory total (NVML)."),
    _otel(n.GPU_UTILIZATION, "1", "gauge", (GPU_INDEX, GPU_UUID), "GPU utilisation 0..1 (NVML)."),
    _otel(
        n.KV_CACHE_USAGE,
        "1",
        "gauge",
        (ENGINE, MODEL, NAMESPACE, POD),
        "KV-cache usage 0..1 per engine instance, from the engine's own metrics.",
    ),
    _otel(
        n.ENGINE_REQUESTS_RUNNING,
        "{request}",
        "gauge",
        (ENGINE, MODEL, NAMESPACE, POD),
        "Requests in the engine's running batch.",
    ),
    _otel(
        n.ENGINE_REQUESTS_WAITING,
        "{request}",
        "gauge",
        (ENGINE, MODEL, NAMESPACE, POD),
        "Requests queued in the engine (queue depth).",
    ),
    _otel(
        n.NODE_FRAGMENTATION,
        "1",
        "gauge",
        (NODE,),
        "Node GPU-memory fragmentation rho = 1 - max_g(free_g) / sum_g(free_g).",
    ),
    _otel(
        n.NODE_LARGEST_FREE_EXTENT,
        "By",
        "gauge",
        (NODE,),
        "Largest free GPU memory on one GPU of the node, max_g(free_g).",
    ),
    _otel(
        n.NODE_ACTIVE_STREAMS,
        "{request}",
        "gauge",
        (NODE,),
        "Inference requests in flight on the node.",
    ),
    _otel(
        n.NODE_IMAGE_TOKEN_SHARE,
        "1",
        "gauge",
        (NODE,),
        "Share of image tokens in the node's recent traffic.",
    ),
    _otel(
        n.TCP_RTT,
        "s",
        "histogram",
        _POD_PORT,
        "Smoothed TCP round-trip time per pod (tcp:tcp_probe srtt).",
    ),
    _otel(
        n.TCP_RETRANSMITS,
        "{segment}",
        "counter",
        _POD_PORT,
        "TCP retransmissions per pod (tcp:tcp_retransmit_skb).",
    ),
    _otel(
        n.ACCEPT_QUEUE_DELAY,
        "s",
        "histogram",
        _POD_PORT,
        "Connection established to accept() per listening port: head-of-line wait.",
    ),
    _otel(
        n.ACCEPT_QUEUE_BACKLOG,
        "{connection}",
        "gauge",
        (PORT, "limit"),
        "Accept-queue length at the last accept() per listening port; `limit` is the "
        "socket's backlog limit.",
    ),
    _otel(
        n.CONNECTION_EDGES,
        "{connection}",
        "counter",
        ("client_address", "client_pod", PORT, NAMESPACE, POD),
        "Connections from a client pod to a server pod:port (dependency graph edges).",
    ),
    _otel(
        n.COLLECTOR_SOURCE_UP,
        "",
        "gauge",
        ("source",),
        "1 when a collector source (bpf, nvml, engine, kubernetes, otlp) works, else 0.",
    ),
    _otel(
        n.COLLECTOR_EVENTS,
        "{event}",
        "counter",
        ("program",),
        "Events read from the collector's BPF programs.",
    ),
    _otel(
        n.COLLECTOR_DROPPED,
        "{event}",
        "counter",
        ("reason",),
        "Samples or events dropped (full tables, lost perf events, failed exports).",
    ),
)

_SELF: Final = (
    Metric(
        n.EXTENDER_REQUESTS,
        "counter",
        "{request}",
        ("verb", "code"),
        "Extender HTTP requests by verb (filter, prioritize, ...) and status code.",
        "extender",
    ),
    Metric(
        n.EXTENDER_REQUEST_DURATION,
        "histogram",
        "s",
        ("verb",),
        "Extender request latency per verb, body read to response written.",
        "extender",
    ),
    Metric(
        n.EXTENDER_FILTER_FAILURES,
        "counter",
        "{node}",
        ("reason",),
        "Nodes failed by the filter, by reason.",
        "extender",
    ),
    Metric(
        n.EXTENDER_SCORE_TERM,
        "histogram",
        "1",
        ("term",),
        "Distribution of each prioritize term (fragmentation, load, spread, modality, qos) "
        "in [0, 1].",
        "extender",
    ),
    Metric(
        n.EXTENDER_SIGNALS,
        "counter",
        "{read}",
        ("state",),
        "Nodes seen in requests by the state of their signals: fresh, stale, missing, "
        "invalid, or unknown (not in the node cache).",
        "extender",
    ),
    Metric(
        n.EXTENDER_CACHE_SYNCED,
        "gauge",
        "1",
        ("resource",),
        "1 once the node or pod cache (resource nodes, pods) finished its first list, else 0.",
        "extender",
    ),
    Metric(
        n.EXTENDER_DECISIONS,
        "counter",
        "{decision}",
        ("outcome",),
        "Prioritize decisions by outcome (placed, no_fit, invalid_pod, no_gpu).",
        "extender",
    ),
    Metric(
        n.ADAPTER_REQUESTS,
        "counter",
        "{request}",
        ("kind", "code"),
        "API requests by route kind (read, discovery, health, other) and HTTP status code.",
        "adapter",
    ),
    Metric(
        n.ADAPTER_REQUEST_DURATION,
        "histogram",
        "s",
        (),
        "External-metrics API request latency.",
        "adapter",
    ),
    Metric(
        n.ADAPTER_SERIES,
        "gauge",
        "{series}",
        (),
        "Series held by the OTLP source's windowed store.",
        "adapter",
    ),
    Metric(
        n.ADAPTER_SERIES_DROPPED,
        "counter",
        "{series}",
        (),
        "Series evicted because the store was full (LRU).",
        "adapter",
    ),
    Metric(
        n.ADAPTER_OTLP_POINTS,
        "counter",
        "{point}",
        (),
        "OTLP data points stored.",
        "adapter",
    ),
    Metric(
        n.ADAPTER_STALE_READS,
        "counter",
        "{read}",
        (),
        "Metric reads whose matching series were all older than the staleness limit.",
        "adapter",
    ),
)

_KSM: Final = (
    Metric(
        "kube_horizontalpodautoscaler_status_current_replicas",
        "gauge",
        "{replica}",
        ("namespace", "horizontalpodautoscaler"),
        "Current replicas of an HPA's target (kube-state-metrics).",
        "kube-state-metrics",
    ),
    Metric(
        "kube_horizontalpodautoscaler_status_desired_replicas",
        "gauge",
        "{replica}",
        ("namespace", "horizontalpodautoscaler"),
        "Replicas the HPA controller wants (kube-state-metrics).",
        "kube-state-metrics",
    ),
    Metric(
        "kube_horizontalpodautoscaler_spec_max_replicas",
        "gauge",
        "{replica}",
        ("namespace", "horizontalpodautoscaler"),
        "The HPA's maxReplicas (kube-state-metrics).",
        "kube-state-metrics",
    ),
)

CATALOG: Final[tuple[Metric, ...]] = _COLLECTOR + _SELF + _KSM


def by_name(name: str) -> Metric:
    """The catalogue entry for a Prometheus family name; KeyError names the metric."""
    for m in CATALOG:
        if m.name == name:
            return m
    raise KeyError(f"metric {name!r} is not in the kvspread catalogue")
