"""Every name that crosses a boundary: Kubernetes labels and annotations, metric names,
OTel attributes. One place, so that the collector, the extender, the adapter, the
dashboards and the rules cannot drift apart (docs/design.md sections 2, 3 and 6).

Metrics are `MetricDescriptor`s (name, unit, kind, help); their `.prometheus` name is what
`prometheus_name` makes of them (the standard OTel-to-Prometheus translation), and the
exporters, the catalogue, the dashboards and the rules all read them. Labels, annotations
and attributes stay plain strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

# --- Kubernetes conventions (docs/design.md section 2) ---------------------------------------
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
ATTR_K8S_POD_UID: Final = "k8s.pod.uid"
ATTR_SERVICE_NAME: Final = "service.name"
ATTR_MODALITY: Final = "llm.modality"
ATTR_GPU_INDEX: Final = "gpu.index"
ATTR_GPU_UUID: Final = "gpu.uuid"
ATTR_GPU_MEMORY_OWNER: Final = "kvspread.gpu.memory.owner"
"""On kvspread.gpu.memory.used: `pod` (one pod's processes) or `no_pod` (processes in no
pod); absent on the GPU's own figure, so `{kvspread_gpu_memory_owner=""}` selects it."""
GPU_MEMORY_OWNERS: Final = ("pod", "no_pod")
DCGM_LABELS: Final = ("gpu", "UUID", "modelName", "Hostname", "pod", "namespace", "container")
"""Labels of DCGM_FI_DEV_FB_USED as dcgm-exporter spells them (NVIDIA/dcgm-exporter,
internal/pkg/transformation/const.go for pod/namespace/container). `container` stays empty
(Prometheus: absent): the collector joins GPU processes to pods by cgroup, not to containers.
dcgm-exporter's `device` (nvidia<minor>) is not written: NVML's index is not the minor."""
ATTR_ENGINE: Final = "llm.engine"
ATTR_MODEL: Final = "llm.model"
ATTR_CLIENT_ADDRESS: Final = "client.address"
"""Peer address of a connection (OTel semconv); set on edges whose client is no known pod."""
ATTR_CLIENT_POD: Final = "kvspread.client.pod"
"""namespace/name of the client pod of a connection edge (collector, kvspread.connections)."""
ATTR_QOS: Final = "llm.qos"
"""The serving pod's `kvspread.io/qos` label (realtime | batch | best-effort), where known;
the latency SLO rules pick the threshold by it (absent counts as batch)."""
ATTR_GEN_AI_OPERATION: Final = "gen_ai.operation.name"
"""OTel GenAI semconv: chat | text_completion | generate_content, from the route."""
ATTR_GEN_AI_PROVIDER: Final = "gen_ai.provider.name"
"""OTel GenAI semconv (required on gen_ai.server metrics): the API flavour the route speaks
(`openai` for the OpenAI-compatible routes), from the route."""
ATTR_GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
"""OTel GenAI semconv (conditionally required, "if available"): the model the request names,
the top-level "model" of its captured JSON body or the {model} segment of its path
(bpf/model.py); absent when the capture holds neither. Not guessed from the pod's
kvspread.io/model label, which says what the pod serves, not what a request asked."""

# --- Metric descriptors and the OTel-to-Prometheus translation ------------------------
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


MetricKind = Literal["counter", "gauge", "histogram"]
"""The instrument kinds kvspread declares (a subset of InstrumentKind)."""


@dataclass(frozen=True)
class MetricDescriptor:
    """One metric: the name it is declared under, its UCUM unit, its kind and its help.

    The exporters, the catalogue, the dashboards and the rules all read these, so a name
    and its unit are written once. Collector metrics are declared by their OTel name (what
    OTLP carries); self-monitoring metrics by their Prometheus name, which the translation
    leaves as it is. `help` is the HELP text of the Prometheus exposition (the catalogue in
    observability/ keeps a longer reference text).
    """

    name: str
    unit: str
    kind: MetricKind
    help: str
    boolean: bool = False
    """A 0/1 state (source up, cache synced): unit 1 on the wire, but the Prometheus name
    takes no `_ratio`, as `up` does not."""
    foreign: bool = False
    """A name another tool defines (dcgm-exporter's `DCGM_FI_DEV_FB_USED`): served exactly as
    that tool spells it, so dashboards written for it read ours; never translated."""

    @property
    def prometheus(self) -> str:
        """The Prometheus family name (`_total` included for counters; prometheus_client
        strips it itself where it appends one)."""
        if self.foreign:
            return self.name
        return prometheus_name(self.name, "" if self.boolean else self.unit, self.kind)


# --- Collector metrics (OTel names; docs/design.md section 6) ---------------------------------
HTTP_SERVER_REQUEST_DURATION: Final = MetricDescriptor(
    "http.server.request.duration",
    "s",
    "histogram",
    "Server-side HTTP request duration, first request byte read to last response "
    "byte written (eBPF).",
)
HTTP_SERVER_TIME_TO_FIRST_BYTE: Final = MetricDescriptor(
    "kvspread.http.server.time_to_first_byte",
    "s",
    "histogram",
    "First request byte read to first response byte written (eBPF).",
)
HTTP_SERVER_UNSAMPLED_DURATION: Final = MetricDescriptor(
    "kvspread.http.server.unsampled_request.duration",
    "s",
    "histogram",
    "Requests over bpf.max_requests_per_s (no event to user space), first request byte "
    "read to last response byte written, log2 buckets aggregated in the kernel (eBPF).",
)
"""Aggregated in the kernel per (port, pod): every request is counted at any rate."""
GEN_AI_SERVER_TIME_TO_FIRST_TOKEN: Final = MetricDescriptor(
    "gen_ai.server.time_to_first_token",
    "s",
    "histogram",
    "SSE responses: last request byte read to the first data event written (eBPF).",
)
"""OTel GenAI semconv name."""
GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN: Final = MetricDescriptor(
    "gen_ai.server.time_per_output_token",
    "s",
    "histogram",
    "SSE responses: mean time between data events after the first (eBPF).",
)
"""OTel GenAI semconv name: (last data event - first) / (data events - 1), `data: [DONE]`
excluded."""
GEN_AI_SERVER_NORMALIZED_LATENCY: Final = MetricDescriptor(
    "kvspread.gen_ai.server.normalized_latency",
    "s",
    "histogram",
    "SSE responses: request duration / data events, the end-to-end latency per output "
    "token that a per-token SLO budgets (eBPF).",
)
"""Not an OTel name: the vLLM paper's "normalized latency" (Kwon et al., SOSP 2023, section
6.1: end-to-end latency divided by output length), per request; `data: [DONE]` excluded."""
GPU_MEMORY_USED: Final = MetricDescriptor(
    "kvspread.gpu.memory.used",
    "By",
    "gauge",
    "GPU memory used (NVML): per GPU, and per pod on it where kvspread.gpu.memory.owner is set.",
)
"""One point per GPU (no owner attribute: the device's figure) plus its breakdown: one
point per pod with processes on the GPU (owner `pod`, with k8s.pod.uid and, once the pod
table knows the UID, k8s.namespace.name and k8s.pod.name) and one for the processes in no
pod (owner `no_pod`). A pod whose memory NVML does not report has no point."""
DCGM_FB_USED: Final = MetricDescriptor(
    "DCGM_FI_DEV_FB_USED",
    "MiBy",
    "gauge",
    "Framebuffer memory used (in MiB), per pod on the GPU (kvspread, NVML per-process memory).",
    foreign=True,
)
"""dcgm-exporter's name, unit (MiB) and labels (gpu, UUID, modelName, Hostname, and in its
Kubernetes mode pod, namespace, container), one point per pod with processes on the GPU
whose memory NVML reports: the per-pod figure of kvspread.gpu.memory.used under the name
GPU dashboards and llm-d's DCGM data source read. Prometheus exposition only."""
GPU_MEMORY_TOTAL: Final = MetricDescriptor(
    "kvspread.gpu.memory.total", "By", "gauge", "GPU memory total (NVML)."
)
GPU_UTILIZATION: Final = MetricDescriptor(
    "kvspread.gpu.utilization", "1", "gauge", "GPU utilisation 0..1 (NVML)."
)
KV_CACHE_USAGE: Final = MetricDescriptor(
    "kvspread.kv_cache.usage", "1", "gauge", "KV-cache usage 0..1 reported by the engine."
)
ENGINE_REQUESTS_RUNNING: Final = MetricDescriptor(
    "kvspread.engine.requests.running",
    "{request}",
    "gauge",
    "Requests in the engine's running batch.",
)
ENGINE_REQUESTS_WAITING: Final = MetricDescriptor(
    "kvspread.engine.requests.waiting", "{request}", "gauge", "Requests queued in the engine."
)
NODE_FRAGMENTATION: Final = MetricDescriptor(
    "kvspread.node.fragmentation", "1", "gauge", "Node GPU-memory fragmentation rho."
)
"""rho of docs/design.md section 4."""
NODE_LARGEST_FREE_EXTENT: Final = MetricDescriptor(
    "kvspread.node.largest_free_extent", "By", "gauge", "Largest free GPU memory on one GPU."
)
NODE_ACTIVE_STREAMS: Final = MetricDescriptor(
    "kvspread.node.active_streams", "{request}", "gauge", "Inference requests in flight."
)
NODE_IMAGE_TOKEN_SHARE: Final = MetricDescriptor(
    "kvspread.node.image_token_share",
    "1",
    "gauge",
    "Estimated image-token share of recent traffic.",
)
TCP_RTT: Final = MetricDescriptor(
    "kvspread.tcp.rtt",
    "s",
    "histogram",
    "Smoothed TCP RTT samples of traced server connections, log2 buckets (eBPF).",
)
TCP_RETRANSMITS: Final = MetricDescriptor(
    "kvspread.tcp.retransmits",
    "{segment}",
    "counter",
    "TCP segments retransmitted on traced server connections (eBPF).",
)
ACCEPT_QUEUE_DELAY: Final = MetricDescriptor(
    "kvspread.accept_queue.delay",
    "s",
    "histogram",
    "Handshake complete (connection queued) to accept() per listening port (eBPF).",
)
ACCEPT_QUEUE_BACKLOG: Final = MetricDescriptor(
    "kvspread.accept_queue.backlog",
    "{connection}",
    "gauge",
    "Accept queue length of the listening socket at the last accept() (eBPF).",
)
CONNECTION_EDGES: Final = MetricDescriptor(
    "kvspread.connections",
    "{connection}",
    "counter",
    "Accepted connections from client to server pod:port (eBPF).",
)
COLLECTOR_SOURCE_UP: Final = MetricDescriptor(
    "kvspread.collector.source.up",
    "1",
    "gauge",
    "1 when the source works, 0 when it is missing (see /readyz for why).",
    boolean=True,
)
"""Per source: bpf, nvml, engine, kubernetes, otlp."""
COLLECTOR_EVENTS: Final = MetricDescriptor(
    "kvspread.collector.bpf.events", "{event}", "counter", "Events read from the BPF programs."
)
COLLECTOR_REQUEST_MODELS: Final = MetricDescriptor(
    "kvspread.collector.request_models",
    "{stream}",
    "counter",
    "Token streams by whether their gen_ai.request.model was read.",
)
"""outcome: named | past_capture (the capture ends before the body's "model") | not_named
| capped (labelled `other`: the process had bpf.model.MAX_MODELS_PER_PROCESS names)."""
COLLECTOR_DROPPED: Final = MetricDescriptor(
    "kvspread.collector.dropped",
    "{event}",
    "counter",
    "Samples or events dropped (full tables, lost events, unparsable bytes).",
)

LATENCY_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.12, 0.2, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    30.0, 60.0, 120.0,
)  # fmt: skip
"""Bucket bounds (s) of the latency histograms (http.server.request.duration, time to first
byte): OTel's defaults for http.server.request.duration, plus the SLO thresholds that the
adapter and the Prometheus rules read exactly (0.05 s realtime is a default bound already,
0.12 s batch, 0.2 s good-request threshold), plus 30/60/120 s for long generations. A bound
missing here makes an SLI empty, never wrong."""

GEN_AI_TTFT_BUCKETS: Final = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
"""Bounds (s) of gen_ai.server.time_to_first_token: the semantic conventions' advised
ExplicitBucketBoundaries (open-telemetry/semantic-conventions, docs/gen-ai/gen-ai-metrics.md,
"Metric: gen_ai.server.time_to_first_token"). The TTFT SLO rules read `le="1.0"`, one of them."""
GEN_AI_TPOT_BUCKETS: Final = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
)  # fmt: skip
"""Bounds (s) of gen_ai.server.time_per_output_token: the advised ExplicitBucketBoundaries
(same file, "Metric: gen_ai.server.time_per_output_token")."""

NORMALIZED_LATENCY_BUCKETS: Final = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.12, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
"""Bounds (s) of kvspread.gen_ai.server.normalized_latency: the TPOT bounds, plus the batch
budget 0.12 s that the adapter's over-budget share reads exactly (0.05 s realtime is one
already), plus 5 and 10 s for a few tokens after a long first one."""

# --- Adapter external metrics (served names; docs/design.md section 6) -----------------------
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
SLI_QUEUE_DEPTH_PER_REPLICA: Final = "kvspread_queue_depth_per_replica"
SLI_SLO_PRESSURE: Final = "kvspread_slo_pressure"
"""max(term / target) over its terms (TTFT and TPOT p95, queue per replica, KV usage, the
over-budget shares): scale with a Value target of 1 (issue 25)."""
SLI_REQUESTS_PER_SECOND_LONG: Final = "kvspread_requests_per_second_long"
SLI_ENGINE_REPLICAS: Final = "kvspread_engine_replicas"
SLI_OVER_50MS_PER_TOKEN: Final = "kvspread_requests_over_50ms_per_token_ratio"
SLI_OVER_120MS_PER_TOKEN: Final = "kvspread_requests_over_120ms_per_token_ratio"
"""Share of streamed requests whose end-to-end latency per output token was over the
realtime (50 ms) or batch (120 ms) budget of docs/design.md section 2."""
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
    SLI_QUEUE_DEPTH_PER_REPLICA,
    SLI_REQUESTS_PER_SECOND_LONG,
    SLI_ENGINE_REPLICAS,
    SLI_OVER_50MS_PER_TOKEN,
    SLI_OVER_120MS_PER_TOKEN,
    SLI_SLO_PRESSURE,
)

# --- Self-monitoring metrics (Prometheus-native: `name` is the Prometheus name already) ----
EXTENDER_REQUESTS: Final = MetricDescriptor(
    "kvspread_extender_requests_total",
    "{request}",
    "counter",
    "Extender HTTP requests by verb and status code",
)
EXTENDER_REQUEST_DURATION: Final = MetricDescriptor(
    "kvspread_extender_request_duration_seconds",
    "s",
    "histogram",
    "Time to answer an extender request, by verb",
)
EXTENDER_FILTER_FAILURES: Final = MetricDescriptor(
    "kvspread_extender_filter_failures_total",
    "{node}",
    "counter",
    "Nodes failed by the filter, by reason (gpu_memory, cpu, invalid_pod, stale_signals)",
)
EXTENDER_SCORE_TERM: Final = MetricDescriptor(
    "kvspread_extender_score_term",
    "1",
    "histogram",
    "Value (0..1) of each prioritize term over all scored nodes",
)
EXTENDER_SIGNALS: Final = MetricDescriptor(
    "kvspread_extender_node_signals_total",
    "{read}",
    "counter",
    "Nodes seen in requests by the state of their kvspread.io/signals "
    "(fresh, stale, missing, invalid, unknown = not in the node cache)",
)
EXTENDER_CACHE_SYNCED: Final = MetricDescriptor(
    "kvspread_extender_cache_synced",
    "1",
    "gauge",
    "1 once the cache has completed its first list (per resource), else 0",
    boolean=True,
)
EXTENDER_FILTER_DECISIONS: Final = MetricDescriptor(
    "kvspread_extender_filter_decisions_total",
    "{decision}",
    "counter",
    "Filter calls by outcome: passed (at least one node passed), no_fit (every node "
    "failed), invalid_pod (the pod's kvspread fields are invalid)",
)
EXTENDER_PRIORITIZE_DECISIONS: Final = MetricDescriptor(
    "kvspread_extender_prioritize_decisions_total",
    "{decision}",
    "counter",
    "Prioritize calls by outcome: placed (a best node was picked), no_fit (no node fits), "
    "no_gpu (no known node to score), invalid_pod",
)
EXTENDER_LEDGER_BINDINGS: Final = MetricDescriptor(
    "kvspread_extender_ledger_bindings_total",
    "{pod}",
    "counter",
    "Bindings seen in the pod watch for pods the ledger booked, by outcome: as_booked (bound "
    "where the ledger held it), elsewhere (the scheduler chose another node)",
)
EXTENDER_CONNECTIONS_REFUSED: Final = MetricDescriptor(
    "kvspread_extender_connections_refused_total",
    "{connection}",
    "counter",
    "Connections the extender answered and closed before its app saw a request, by reason: "
    "max_connections (503), header_timeout and body_timeout (408), header_too_large (431)",
)
ADAPTER_REQUESTS: Final = MetricDescriptor(
    "kvspread_adapter_requests_total",
    "{request}",
    "counter",
    "API requests by route kind and HTTP code",
)
ADAPTER_REQUEST_DURATION: Final = MetricDescriptor(
    "kvspread_adapter_request_duration_seconds",
    "s",
    "histogram",
    "API request handling time (server side), seconds",
)
ADAPTER_SERIES: Final = MetricDescriptor(
    "kvspread_adapter_series", "{series}", "gauge", "series held in the OTLP store"
)
ADAPTER_SERIES_DROPPED: Final = MetricDescriptor(
    "kvspread_adapter_series_dropped_total",
    "{series}",
    "counter",
    "series evicted because the store was full (LRU)",
)
ADAPTER_OTLP_POINTS: Final = MetricDescriptor(
    "kvspread_adapter_otlp_points_total", "{point}", "counter", "OTLP data points stored"
)
ADAPTER_STALE_READS: Final = MetricDescriptor(
    "kvspread_adapter_stale_reads_total",
    "{read}",
    "counter",
    "metric reads that found no fresh data (docs/adapter.md, No fresh data)",
)
ADAPTER_REFUSED_READS: Final = MetricDescriptor(
    "kvspread_adapter_refused_reads_total",
    "{read}",
    "counter",
    "quantile and over-ratio reads refused because the histogram's buckets cannot bound the value",
)
ADAPTER_GUARD_HOLDS: Final = MetricDescriptor(
    "kvspread_adapter_guard_holds_total",
    "{read}",
    "counter",
    "SLO pressure reads whose value the scale-down guard raised to hold replicas",
)
ADAPTER_GUARD_VIOLATIONS: Final = MetricDescriptor(
    "kvspread_adapter_guard_violations_total",
    "{read}",
    "counter",
    "SLO pressure reads over 1 the scale-down guard remembered",
)
ADAPTER_CONNECTIONS: Final = MetricDescriptor(
    "kvspread_adapter_connections",
    "{connection}",
    "gauge",
    "connections served now, by port (api, otlp)",
)
ADAPTER_CONNECTIONS_REFUSED: Final = MetricDescriptor(
    "kvspread_adapter_connections_refused_total",
    "{connection}",
    "counter",
    "connections refused (503) because the port served its max_connections, by port",
)
ADAPTER_CONNECTIONS_EVICTED: Final = MetricDescriptor(
    "kvspread_adapter_connections_evicted_total",
    "{connection}",
    "counter",
    "idle connections closed to admit a new one at max_connections, by port",
)

# --- Endpoint picker (router/metrics.py; Prometheus-native names, as the self-monitoring ones)
ROUTER_PICKS: Final = MetricDescriptor(
    "kvspread_router_picks_total", "{pick}", "counter", "Endpoint picks by endpoint and reason"
)
ROUTER_PICK_DURATION: Final = MetricDescriptor(
    "kvspread_router_pick_duration_seconds",
    "s",
    "histogram",
    "Time from the complete request body to the decision",
)
ROUTER_STALE_ENDPOINTS: Final = MetricDescriptor(
    "kvspread_router_stale_endpoints",
    "{endpoint}",
    "gauge",
    "Endpoints with stale engine metrics",
)
ROUTER_ENDPOINTS: Final = MetricDescriptor(
    "kvspread_router_endpoints", "{endpoint}", "gauge", "Endpoints in the set"
)
ROUTER_SHEDS: Final = MetricDescriptor(
    "kvspread_router_sheds_total", "{request}", "counter", "Requests refused with 429"
)
ROUTER_BAD_REQUESTS: Final = MetricDescriptor(
    "kvspread_router_bad_requests_total",
    "{request}",
    "counter",
    "Request bodies refused with 400",
)
ROUTER_PREFIX_ENTRIES: Final = MetricDescriptor(
    "kvspread_router_prefix_index_entries",
    "{entry}",
    "gauge",
    "Entries of the approximate prefix index",
)
ROUTER_PREFIX_BYTES: Final = MetricDescriptor(
    "kvspread_router_prefix_index_bytes",
    "By",
    "gauge",
    "Memory estimate of the approximate prefix index",
)
ROUTER_CACHE_EVICTIONS: Final = MetricDescriptor(
    "kvspread_router_cache_evictions_total",
    "{entry}",
    "counter",
    "Entries the bounded cache indexes forgot",
)
ROUTER_KV_EVENTS: Final = MetricDescriptor(
    "kvspread_router_kv_events_total",
    "{message}",
    "counter",
    "KV-cache event messages read in precise mode, by outcome",
)
ROUTER_BODY_HELD: Final = MetricDescriptor(
    "kvspread_router_body_held_bytes",
    "By",
    "gauge",
    "Request body bytes the picker holds now (budget: server.max_bodies_bytes)",
)
"""Against the total body budget (router/bodybudget.py): at the budget, new bodies get 429."""
ROUTER_BODY_REFUSALS: Final = MetricDescriptor(
    "kvspread_router_body_refusals_total",
    "{request}",
    "counter",
    "Request bodies refused over a body budget, by code (413 request budget, 429 total)",
)
ROUTER_GRPC_CONNECTIONS: Final = MetricDescriptor(
    "kvspread_router_grpc_connections",
    "{connection}",
    "gauge",
    "gRPC connections the h2 server serves now (limit: server.max_connections)",
)
ROUTER_GRPC_BUFFERED: Final = MetricDescriptor(
    "kvspread_router_grpc_buffered_bytes",
    "By",
    "gauge",
    "Partial gRPC messages and frames held over all connections (bound: server.max_bodies_bytes)",
)
ROUTER_GRPC_LIMITS: Final = MetricDescriptor(
    "kvspread_router_grpc_limits_total",
    "{event}",
    "counter",
    "Times a bound of the h2 server acted, by limit: connection_refused, connection_evicted, "
    "read_paused, message_late",
)
ROUTER_SERVED_ELSEWHERE: Final = MetricDescriptor(
    "kvspread_router_served_elsewhere_total",
    "{request}",
    "counter",
    "Requests the gateway reports served by another pool endpoint than the one picked",
)

# --- llm-d's endpoint-picker families, served beside the router's own (router/llmdmetrics.py).
# Names, types and labels are llm-d-router's (pkg/epp/metrics/llm_d_router_metrics.go), so
# llm-d's dashboards read the picker: foreign names, never translated.
LLMD_REQUESTS: Final = MetricDescriptor(
    "llm_d_epp_request_total",
    "{request}",
    "counter",
    "Requests routed (llm-d's family)",
    foreign=True,
)
LLMD_REQUEST_ERRORS: Final = MetricDescriptor(
    "llm_d_epp_request_error_total",
    "{request}",
    "counter",
    "Requests refused, by llm-d's error code",
    foreign=True,
)
LLMD_SCHEDULER_DURATION: Final = MetricDescriptor(
    "llm_d_epp_scheduler_e2e_duration_seconds",
    "s",
    "histogram",
    "Time of the choice (cache lookup and scoring), seconds",
    foreign=True,
)
LLMD_SCHEDULER_ATTEMPTS: Final = MetricDescriptor(
    "llm_d_epp_scheduler_attempts_total",
    "{attempt}",
    "counter",
    "Choices made (success) or impossible (failure)",
    foreign=True,
)
LLMD_READY_ENDPOINTS: Final = MetricDescriptor(
    "llm_d_epp_ready_endpoints",
    "{endpoint}",
    "gauge",
    "Endpoints of the pool with fresh engine metrics",
    foreign=True,
)
LLMD_AVG_KV_CACHE: Final = MetricDescriptor(
    "llm_d_epp_average_kv_cache_utilization",
    "1",
    "gauge",
    "Mean KV-cache usage (0..1) of the pool's fresh endpoints",
    foreign=True,
)
LLMD_AVG_QUEUE: Final = MetricDescriptor(
    "llm_d_epp_average_queue_size",
    "{request}",
    "gauge",
    "Mean requests waiting in the engines of the pool's fresh endpoints",
    foreign=True,
)
LLMD_AVG_RUNNING: Final = MetricDescriptor(
    "llm_d_epp_average_running_requests",
    "{request}",
    "gauge",
    "Mean requests running in the engines of the pool's fresh endpoints",
    foreign=True,
)
LLMD_SD_KV_CACHE: Final = MetricDescriptor(
    "llm_d_epp_std_dev_kv_cache_utilization",
    "1",
    "gauge",
    "Standard deviation of the KV-cache usage of the pool's fresh endpoints",
    foreign=True,
)
LLMD_SD_QUEUE: Final = MetricDescriptor(
    "llm_d_epp_std_dev_queue_size",
    "{request}",
    "gauge",
    "Standard deviation of the requests waiting at the pool's fresh endpoints",
    foreign=True,
)
LLMD_SD_RUNNING: Final = MetricDescriptor(
    "llm_d_epp_std_dev_running_requests",
    "{request}",
    "gauge",
    "Standard deviation of the requests running at the pool's fresh endpoints",
    foreign=True,
)
LLMD_REQUEST_LABELS: Final = ("model_name", "target_model_name", "fairness_id", "priority")
LLMD_ATTEMPT_LABELS: Final = ("status", "target_model_name", "endpoint_name", "namespace", "port")
LLMD_POOL_LABELS: Final = ("name",)

DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
"""A Kubernetes namespace (RFC 1123 label: lowercase letters, digits and dashes, at most
63); match with `fullmatch`. A namespace goes into API paths, so `a/../b` must not."""
DNS_SUBDOMAIN: Final = re.compile(
    r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
"""An object name such as an InferencePool's (RFC 1123 subdomain); match with `fullmatch`."""
