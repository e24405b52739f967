"""Every name that crosses a boundary: Kubernetes labels and annotations, metric names,
OTel attributes. One place, so that the collector, the extender, the adapter, the
dashboards and the rules cannot drift apart (DESIGN.md sections 2, 3 and 6).

Metric constants give the OTel instrument and unit in their docstring; the Prometheus
name is what `prometheus_name` makes of them (the standard OTel-to-Prometheus
translation), and the dashboards and rules use those.
"""

from __future__ import annotations

import re
from typing import Final, Literal

# --- Kubernetes conventions (DESIGN.md section 2) ---------------------------------------
DOMAIN: Final = "kvspread.io"
LABEL_MODEL: Final = "kvspread.io/model"
"""Pod label: model identity; replicas of one model are spread."""
LABEL_MODALITY: Final = "kvspread.io/modality"
"""Pod label: text | image | multi-image | audio (default text)."""
LABEL_QOS: Final = "kvspread.io/qos"
"""Pod label: realtime | batch | best-effort."""
ANNOTATION_GPU_MEMORY: Final = "kvspread.io/gpu-memory"
"""Pod annotation: GPU memory one instance needs on each of its GPUs, a quantity (24Gi)."""
LABEL_POOL: Final = "kvspread.io/pool"
"""Node label: language | mixed | vision."""
LABEL_NVLINK: Final = "kvspread.io/nvlink"
"""Node label: "true" when the node's GPUs are NVLink-connected."""
ANNOTATION_SIGNALS: Final = "kvspread.io/signals"
"""Node annotation written by the collector: the node-signals JSON document."""
ANNOTATION_METRICS_PORT: Final = "kvspread.io/metrics-port"
"""Pod annotation: port of the inference engine's Prometheus /metrics endpoint."""
ANNOTATION_METRICS_PATH: Final = "kvspread.io/metrics-path"
"""Pod annotation: path of the engine's metrics endpoint (default /metrics)."""
ANNOTATION_ENGINE: Final = "kvspread.io/engine"
"""Pod annotation: vllm | trtllm | sglang | tgi (otherwise detected from the metric names)."""
RESOURCE_GPU: Final = "nvidia.com/gpu"

MODALITIES: Final = ("text", "image", "multi-image", "audio")
QOS_CLASSES: Final = ("realtime", "batch", "best-effort")
POOLS: Final = ("language", "mixed", "vision")

# --- OTel attributes (semantic conventions where they exist) ----------------------------
ATTR_HTTP_METHOD: Final = "http.request.method"
ATTR_HTTP_STATUS: Final = "http.response.status_code"
ATTR_HTTP_ROUTE: Final = "http.route"
ATTR_SERVER_PORT: Final = "server.port"
ATTR_K8S_NAMESPACE: Final = "k8s.namespace.name"
ATTR_K8S_POD: Final = "k8s.pod.name"
ATTR_K8S_NODE: Final = "k8s.node.name"
ATTR_SERVICE_NAME: Final = "service.name"
ATTR_MODALITY: Final = "llm.modality"
ATTR_GPU_INDEX: Final = "gpu.index"
ATTR_GPU_UUID: Final = "gpu.uuid"
ATTR_ENGINE: Final = "llm.engine"
ATTR_MODEL: Final = "llm.model"
ATTR_CLIENT_ADDRESS: Final = "client.address"
"""Peer address of a connection (OTel semconv); set on edges whose client is no known pod."""
ATTR_CLIENT_POD: Final = "kvspread.client.pod"
"""namespace/name of the client pod of a connection edge (collector, kvspread.connections)."""
ATTR_QOS: Final = "llm.qos"
"""The serving pod's `kvspread.io/qos` label (realtime | batch | best-effort), where known;
the latency SLO rules pick the threshold by it (absent counts as batch)."""

# --- Collector metrics (OTel names; DESIGN.md section 6) ---------------------------------
HTTP_SERVER_REQUEST_DURATION: Final = "http.server.request.duration"
"""Histogram, unit s: server-side request duration measured by eBPF."""
HTTP_SERVER_TIME_TO_FIRST_BYTE: Final = "kvspread.http.server.time_to_first_byte"
"""Histogram, unit s: first request byte read to first response byte written."""
HTTP_SERVER_UNSAMPLED_DURATION: Final = "kvspread.http.server.unsampled_request.duration"
"""Histogram, unit s: requests over the collector's per-second budget, aggregated in the
kernel per (port, pod) in log2 buckets: every request is counted at any rate."""
GEN_AI_SERVER_TIME_TO_FIRST_TOKEN: Final = "gen_ai.server.time_to_first_token"
"""Histogram, unit s (OTel GenAI semconv): SSE responses, last request byte read to the write
completing the first `data:` event (eBPF)."""
GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN: Final = "gen_ai.server.time_per_output_token"
"""Histogram, unit s (OTel GenAI semconv): SSE responses, (last data event - first) /
(data events - 1), `data: [DONE]` excluded (eBPF)."""
ATTR_GEN_AI_OPERATION: Final = "gen_ai.operation.name"
"""OTel GenAI semconv: chat | text_completion | generate_content, from the route."""
GPU_MEMORY_USED: Final = "kvspread.gpu.memory.used"
"""Gauge, unit By: GPU memory used (NVML)."""
GPU_MEMORY_TOTAL: Final = "kvspread.gpu.memory.total"
"""Gauge, unit By: GPU memory total (NVML)."""
GPU_UTILIZATION: Final = "kvspread.gpu.utilization"
"""Gauge, unit 1: GPU utilisation 0..1 (NVML)."""
GPU_POD_MEMORY_USED: Final = "kvspread.gpu.pod.memory.used"
"""Gauge, unit By: GPU memory used by one pod's processes on one GPU (NVML + cgroups)."""
KV_CACHE_USAGE: Final = "kvspread.kv_cache.usage"
"""Gauge, unit 1: KV-cache usage 0..1 per engine instance."""
ENGINE_REQUESTS_RUNNING: Final = "kvspread.engine.requests.running"
"""Gauge, unit {request}: requests in the engine's running batch."""
ENGINE_REQUESTS_WAITING: Final = "kvspread.engine.requests.waiting"
"""Gauge, unit {request}: requests queued in the engine (queue depth)."""
NODE_FRAGMENTATION: Final = "kvspread.node.fragmentation"
"""Gauge, unit 1: node GPU-memory fragmentation rho (DESIGN.md section 4)."""
NODE_LARGEST_FREE_EXTENT: Final = "kvspread.node.largest_free_extent"
"""Gauge, unit By: largest free GPU memory on one GPU of the node."""
NODE_ACTIVE_STREAMS: Final = "kvspread.node.active_streams"
"""Gauge, unit {request}: inference requests in flight on the node."""
NODE_IMAGE_TOKEN_SHARE: Final = "kvspread.node.image_token_share"
"""Gauge, unit 1: share of image tokens in recent traffic."""
TCP_RTT: Final = "kvspread.tcp.rtt"
"""Histogram, unit s: smoothed TCP round-trip time per pod."""
TCP_RETRANSMITS: Final = "kvspread.tcp.retransmits"
"""Counter, unit {segment}: TCP retransmissions per pod."""
ACCEPT_QUEUE_DELAY: Final = "kvspread.accept_queue.delay"
"""Histogram, unit s: SYN (connection established) to accept() per listening port."""
ACCEPT_QUEUE_BACKLOG: Final = "kvspread.accept_queue.backlog"
"""Gauge, unit {connection}: connections waiting in the accept queue per listening port."""
CONNECTION_EDGES: Final = "kvspread.connections"
"""Counter, unit {connection}: connections from client pod to server pod:port."""
COLLECTOR_SOURCE_UP: Final = "kvspread.collector.source.up"
"""Gauge, no unit (so Prometheus sees kvspread_collector_source_up): 1 when a source
(bpf, nvml, engine, kubernetes, otlp) works, else 0."""
COLLECTOR_EVENTS: Final = "kvspread.collector.bpf.events"
"""Counter, unit {event}: events read from BPF programs."""
COLLECTOR_DROPPED: Final = "kvspread.collector.dropped"
"""Counter, unit {event}: samples or events dropped (full tables, lost perf events)."""

LATENCY_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.12, 0.2, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    30.0, 60.0, 120.0,
)  # fmt: skip
"""Bucket bounds (s) of the latency histograms (http.server.request.duration, time to first
byte): OTel's defaults for http.server.request.duration, plus the SLO thresholds that the
adapter and the Prometheus rules read exactly (0.05 s realtime is a default bound already,
0.12 s batch, 0.2 s good-request threshold), plus 30/60/120 s for long generations. A bound
missing here makes an SLI empty, never wrong."""

# --- Adapter external metrics (served names; DESIGN.md section 6) -----------------------
SLI_LATENCY_P50: Final = "kvspread_request_latency_p50_seconds"
SLI_LATENCY_P95: Final = "kvspread_request_latency_p95_seconds"
SLI_LATENCY_P99: Final = "kvspread_request_latency_p99_seconds"
SLI_REQUESTS_PER_SECOND: Final = "kvspread_requests_per_second"
SLI_GOOD_REQUESTS_PER_SECOND: Final = "kvspread_good_requests_per_second"
SLI_ERROR_RATIO: Final = "kvspread_error_ratio"
SLI_QUEUE_DEPTH: Final = "kvspread_queue_depth"
SLI_KV_CACHE_USAGE: Final = "kvspread_kv_cache_usage_ratio"
SLI_TTFT_P95: Final = "kvspread_time_to_first_token_p95_seconds"
SLI_TPOT_P95: Final = "kvspread_time_per_output_token_p95_seconds"
SLI_NAMES: Final = (
    SLI_LATENCY_P50,
    SLI_LATENCY_P95,
    SLI_LATENCY_P99,
    SLI_REQUESTS_PER_SECOND,
    SLI_GOOD_REQUESTS_PER_SECOND,
    SLI_ERROR_RATIO,
    SLI_QUEUE_DEPTH,
    SLI_KV_CACHE_USAGE,
    SLI_TTFT_P95,
    SLI_TPOT_P95,
)

# --- Self-monitoring metrics (Prometheus names) ------------------------------------------
EXTENDER_REQUESTS: Final = "kvspread_extender_requests_total"
EXTENDER_REQUEST_DURATION: Final = "kvspread_extender_request_duration_seconds"
EXTENDER_FILTER_FAILURES: Final = "kvspread_extender_filter_failures_total"
EXTENDER_SCORE_TERM: Final = "kvspread_extender_score_term"
EXTENDER_SIGNALS: Final = "kvspread_extender_node_signals_total"
EXTENDER_CACHE_SYNCED: Final = "kvspread_extender_cache_synced"
EXTENDER_DECISIONS: Final = "kvspread_extender_decisions_total"
ADAPTER_REQUESTS: Final = "kvspread_adapter_requests_total"
ADAPTER_REQUEST_DURATION: Final = "kvspread_adapter_request_duration_seconds"
ADAPTER_SERIES: Final = "kvspread_adapter_series"
ADAPTER_SERIES_DROPPED: Final = "kvspread_adapter_series_dropped_total"
ADAPTER_OTLP_POINTS: Final = "kvspread_adapter_otlp_points_total"
ADAPTER_STALE_READS: Final = "kvspread_adapter_stale_reads_total"

InstrumentKind = Literal["counter", "updowncounter", "gauge", "histogram"]

_UNIT_SUFFIX: Final = {
    "s": "seconds",
    "ms": "milliseconds",
    "By": "bytes",
    "KiBy": "kibibytes",
    "MiBy": "mebibytes",
    "1": "ratio",
    "%": "percent",
}


def prometheus_name(otel_name: str, unit: str, kind: InstrumentKind) -> str:
    """Translate an OTel metric name to its Prometheus name.

    The standard translation (OpenTelemetry "Prometheus and OpenMetrics
    Compatibility"): characters outside [a-zA-Z0-9_:] become "_", the unit is appended
    as a word (s -> seconds, By -> bytes, 1 -> ratio for gauges only), annotations in
    braces ({request}) add nothing, and monotonic counters end in "_total".
    """
    name = re.sub(r"[^a-zA-Z0-9_:]", "_", otel_name)
    name = re.sub(r"__+", "_", name).strip("_")
    suffix = ""
    if unit and not unit.startswith("{"):
        if unit == "1":
            suffix = "ratio" if kind == "gauge" else ""
        else:
            suffix = _UNIT_SUFFIX.get(unit, re.sub(r"[^a-zA-Z0-9_:]", "_", unit))
    if suffix and not name.endswith("_" + suffix):
        name = f"{name}_{suffix}"
    if kind == "counter" and not name.endswith("_total"):
        name = f"{name}_total"
    return name
