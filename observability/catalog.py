"""The catalogue of every metric kvspread's dashboards and rules read, with type, unit and
labels, in Prometheus form.

Every kvspread entry is built from its `kvspread.names` descriptor (name, type, unit), the
one the exporters read, so the catalogue's Prometheus names are the exposition's; OTel
attribute names become labels with dots as underscores (`k8s.namespace.name` ->
`k8s_namespace_name`). The same catalogue renders docs/metrics.md, so the reference and the
queries share one source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from kvspread import names

__all__ = ["Metric", "CATALOG", "label", "by_name", "SERVICE_LABELS", "HISTOGRAM_BUCKETS"]

MetricType = Literal["counter", "gauge", "histogram"]


def label(attribute: str) -> str:
    """Prometheus label name of an OTel attribute (the standard translation)."""
    return attribute.replace(".", "_").replace("-", "_")


NAMESPACE: Final = label(names.ATTR_K8S_NAMESPACE)
POD: Final = label(names.ATTR_K8S_POD)
NODE: Final = label(names.ATTR_K8S_NODE)
SERVICE: Final = label(names.ATTR_SERVICE_NAME)
MODALITY: Final = label(names.ATTR_MODALITY)
QOS: Final = label(names.ATTR_QOS)
ROUTE: Final = label(names.ATTR_HTTP_ROUTE)
METHOD: Final = label(names.ATTR_HTTP_METHOD)
STATUS: Final = label(names.ATTR_HTTP_STATUS)
PORT: Final = label(names.ATTR_SERVER_PORT)
GPU_INDEX: Final = label(names.ATTR_GPU_INDEX)
GPU_UUID: Final = label(names.ATTR_GPU_UUID)
ENGINE: Final = label(names.ATTR_ENGINE)
MODEL: Final = label(names.ATTR_MODEL)
GEN_AI_OPERATION: Final = label(names.ATTR_GEN_AI_OPERATION)
GEN_AI_PROVIDER: Final = label(names.ATTR_GEN_AI_PROVIDER)
GEN_AI_REQUEST_MODEL: Final = label(names.ATTR_GEN_AI_REQUEST_MODEL)
GPU_MEMORY_OWNER: Final = label(names.ATTR_GPU_MEMORY_OWNER)
POD_UID: Final = label(names.ATTR_K8S_POD_UID)

NODE_FROM_SCRAPE: Final = "node"
"""The node label the dashboards and alerts filter collector series by. The collector writes
`k8s_node_name` only on node-level series; its ServiceMonitor / PodMonitor
(manifests/collector/monitoring/) copies `__meta_kubernetes_pod_node_name` into `node` on
every series it scrapes, so `node` is the one label all collector series share."""

SERVICE_LABELS: Final = (NAMESPACE, SERVICE, MODALITY)
"""The labels the SLIs are aggregated by: one SLO per namespace, service and modality."""

HISTOGRAM_BUCKETS: Final = names.LATENCY_BUCKETS
"""Bucket bounds the latency histograms carry (kvspread.names.LATENCY_BUCKETS). The SLO rules
read the `le="0.05"` and `le="0.12"` buckets, so an exporter without those bounds makes the
latency SLIs empty, never wrong."""

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
    source: Literal["collector", "extender", "adapter", "router", "kube-state-metrics"]
    otel_name: str | None = None

    def series(self, suffix: str = "") -> str:
        """The series name to query: `bucket`/`count`/`sum` for histograms."""
        if not suffix:
            return self.name
        if self.type != "histogram":
            raise ValueError(f"{self.name} is a {self.type}; only histograms have _{suffix}")
        return f"{self.name}_{suffix}"


def _entry(
    d: names.MetricDescriptor,
    labels: tuple[str, ...],
    help: str,
    source: Literal["collector", "extender", "adapter", "router"],
) -> Metric:
    """A catalogue entry: name, type and unit from the descriptor; `help` is the reference
    text (longer than the exposition's HELP line)."""
    return Metric(
        name=d.prometheus,
        type=d.kind,
        unit=d.unit,
        labels=labels,
        help=help,
        source=source,
        otel_name=d.name if source == "collector" and not d.foreign else None,
    )


def _otel(d: names.MetricDescriptor, labels: tuple[str, ...], help: str) -> Metric:
    return _entry(d, labels, help, "collector")


_COLLECTOR: Final = (
    _otel(
        names.HTTP_SERVER_REQUEST_DURATION,
        _HTTP_LABELS,
        "Server-side request duration measured by eBPF, first request byte read to last "
        "response byte written (streamed responses included).",
    ),
    _otel(
        names.HTTP_SERVER_TIME_TO_FIRST_BYTE,
        _HTTP_LABELS,
        "First request byte read to first response byte written.",
    ),
    _otel(
        names.HTTP_SERVER_UNSAMPLED_DURATION,
        _POD_PORT,
        "Requests over bpf.max_requests_per_s (no event to user space): first request byte "
        "read to last response byte written, log2 buckets aggregated in the kernel, so every "
        "request is counted at any rate. Appears once a request went over the budget.",
    ),
    _otel(
        names.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN,
        (*_HTTP_LABELS, GEN_AI_OPERATION, GEN_AI_PROVIDER, GEN_AI_REQUEST_MODEL),
        "SSE (text/event-stream) responses: last request byte read to the write completing "
        "the first data event (OTel GenAI semconv; eBPF). Buckets: the semconv's advised "
        "boundaries (0.001 s to 10 s). `gen_ai_provider_name` is the API the route speaks "
        "(`openai` for the OpenAI-compatible routes, `huggingface.tgi`, `nvidia.triton`); "
        "`gen_ai_request_model` the model the request names (the top-level `model` of the "
        "captured body, or the path's `{model}`), empty when the capture ends before it "
        "(kvspread_collector_request_models_total counts how often), `other` past 32 names "
        "per process.",
    ),
    _otel(
        names.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN,
        (*_HTTP_LABELS, GEN_AI_OPERATION, GEN_AI_PROVIDER, GEN_AI_REQUEST_MODEL),
        "SSE responses: (last data event - first) / (data events - 1), data: [DONE] "
        "excluded; streams of one event have none (OTel GenAI semconv; eBPF). Buckets: the "
        "semconv's advised boundaries (0.01 s to 2.5 s).",
    ),
    _otel(
        names.GEN_AI_SERVER_NORMALIZED_LATENCY,
        (*_HTTP_LABELS, GEN_AI_OPERATION, GEN_AI_PROVIDER, GEN_AI_REQUEST_MODEL),
        "SSE responses: request duration / data events, data: [DONE] excluded: the "
        "end-to-end latency per output token a per-token SLO budgets (the vLLM paper's "
        "normalized latency, per request; eBPF). Buckets: the TPOT ones plus 0.12, 5 and "
        "10 s, so both budgets (0.05 s, 0.12 s) are bounds; the adapter's "
        "`kvspread_requests_over_50ms_per_token_ratio` and `_over_120ms_` read them.",
    ),
    _otel(
        names.GPU_MEMORY_USED,
        (GPU_INDEX, GPU_UUID, GPU_MEMORY_OWNER, NAMESPACE, POD, POD_UID),
        "GPU memory used (NVML). One series per GPU without `kvspread_gpu_memory_owner` "
        '(the device\'s figure; select it with `kvspread_gpu_memory_owner=""`), plus its '
        'breakdown on shared GPUs (time-slicing, MPS): `kvspread_gpu_memory_owner="pod"` '
        "per pod with processes on the GPU (`k8s_pod_uid`, and `k8s_namespace_name`, "
        "`k8s_pod_name` once the collector's pod list knows the UID; NVML per-process memory, "
        'host pid -> cgroup -> pod), `"no_pod"` for processes in no pod. The device figure '
        "also counts what no process holds (driver, contexts). A pod whose memory NVML does "
        "not report has no series; absent, never zero, where no driver answers.",
    ),
    _otel(
        names.DCGM_FB_USED,
        names.DCGM_LABELS,
        "The per-pod figure of `kvspread_gpu_memory_used_bytes` in MiB under dcgm-exporter's "
        "name and labels (`gpu`, `UUID`, `modelName`, `Hostname`, and its Kubernetes mode's "
        "`pod`, `namespace`, `container`), so GPU dashboards and llm-d's DCGM data source read "
        "per-pod memory on shared GPUs. One series per pod the collector's pod list names; "
        "`container` is always empty (absent in Prometheus): processes are joined to pods, "
        "not containers; no `device` label (the NVML index is not the /dev/nvidia minor). "
        "Prometheus exposition only (not pushed over OTLP).",
    ),
    _otel(names.GPU_MEMORY_TOTAL, (GPU_INDEX, GPU_UUID), "GPU memory total (NVML)."),
    _otel(names.GPU_UTILIZATION, (GPU_INDEX, GPU_UUID), "GPU utilisation 0..1 (NVML)."),
    _otel(
        names.KV_CACHE_USAGE,
        (ENGINE, MODEL, NAMESPACE, POD),
        "KV-cache usage 0..1 per engine instance, from the engine's own metrics.",
    ),
    _otel(
        names.ENGINE_REQUESTS_RUNNING,
        (ENGINE, MODEL, NAMESPACE, POD),
        "Requests in the engine's running batch.",
    ),
    _otel(
        names.ENGINE_REQUESTS_WAITING,
        (ENGINE, MODEL, NAMESPACE, POD),
        "Requests queued in the engine (queue depth).",
    ),
    _otel(
        names.NODE_FRAGMENTATION,
        (NODE,),
        "Node GPU-memory fragmentation rho = 1 - max_g(free_g) / sum_g(free_g).",
    ),
    _otel(
        names.NODE_LARGEST_FREE_EXTENT,
        (NODE,),
        "Largest free GPU memory on one GPU of the node, max_g(free_g).",
    ),
    _otel(
        names.NODE_ACTIVE_STREAMS,
        (NODE,),
        "Inference requests in flight on the node.",
    ),
    _otel(
        names.NODE_IMAGE_TOKEN_SHARE,
        (NODE,),
        "Share of image tokens in the node's recent traffic.",
    ),
    _otel(
        names.TCP_RTT,
        _POD_PORT,
        "Smoothed TCP round-trip time per pod (tcp:tcp_probe srtt).",
    ),
    _otel(
        names.TCP_RETRANSMITS,
        _POD_PORT,
        "TCP retransmissions per pod (tcp:tcp_retransmit_skb).",
    ),
    _otel(
        names.ACCEPT_QUEUE_DELAY,
        _POD_PORT,
        "Connection established to accept() per listening port: head-of-line wait.",
    ),
    _otel(
        names.ACCEPT_QUEUE_BACKLOG,
        (PORT, "limit"),
        "Accept-queue length at the last accept() per listening port; `limit` is the "
        "socket's backlog limit.",
    ),
    _otel(
        names.CONNECTION_EDGES,
        ("client_address", "client_pod", PORT, NAMESPACE, POD),
        "Connections from a client pod to a server pod:port (dependency graph edges).",
    ),
    _otel(
        names.COLLECTOR_SOURCE_UP,
        ("source",),
        "1 when a collector source (bpf, nvml, engine, kubernetes, otlp) works, else 0.",
    ),
    _otel(
        names.COLLECTOR_EVENTS,
        ("program",),
        "Events read from the collector's BPF programs.",
    ),
    _otel(
        names.COLLECTOR_REQUEST_MODELS,
        ("outcome",),
        "Token streams (SSE responses) by whether the collector read the model their request "
        "names (outcome: named, past_capture: the capture ends before the body's `model`, "
        "not_named, capped: labelled `other`, the process had 32 names already).",
    ),
    _otel(
        names.COLLECTOR_DROPPED,
        ("reason",),
        "Samples or events dropped (full tables, lost perf events, failed exports).",
    ),
)

_SELF: Final = (
    _entry(
        names.EXTENDER_REQUESTS,
        ("verb", "code"),
        "Extender HTTP requests by verb (filter, prioritize, ...) and status code.",
        "extender",
    ),
    _entry(
        names.EXTENDER_REQUEST_DURATION,
        ("verb",),
        "Extender request latency per verb, body read to response written.",
        "extender",
    ),
    _entry(
        names.EXTENDER_FILTER_FAILURES,
        ("reason",),
        "Nodes failed by the filter, by reason.",
        "extender",
    ),
    _entry(
        names.EXTENDER_SCORE_TERM,
        ("term",),
        "Distribution of each prioritize term (fragmentation, load, spread, modality, qos, "
        "contention: only for the pods it covers) "
        "in [0, 1].",
        "extender",
    ),
    _entry(
        names.EXTENDER_SIGNALS,
        ("state",),
        "Nodes seen in requests by the state of their signals: fresh, stale, missing, "
        "invalid, or unknown (not in the node cache).",
        "extender",
    ),
    _entry(
        names.EXTENDER_CACHE_SYNCED,
        ("resource",),
        "1 once the node, pod or NodeSignals cache (resource nodes, pods, nodesignals) finished "
        "its first list, else 0.",
        "extender",
    ),
    _entry(
        names.EXTENDER_LEDGER_BINDINGS,
        ("outcome",),
        "Bindings of booked pods seen in the pod watch: as_booked (where the ledger held the "
        "pod) or elsewhere (the scheduler bound it on another node; a rising share means the "
        "ledger's picks are not the scheduler's: other score plugins outweigh the extender).",
        "extender",
    ),
    _entry(
        names.EXTENDER_CONNECTIONS_REFUSED,
        ("reason",),
        "Connections answered and closed by the connection bounds before a request reached "
        "the extender (extender/connections.py), by reason: max_connections (503), "
        "header_timeout and body_timeout (408), header_too_large (431); every reason from 0. "
        "A rising max_connections count means clients are locked out.",
        "extender",
    ),
    _entry(
        names.EXTENDER_FILTER_DECISIONS,
        ("outcome",),
        "Filter calls by outcome: passed (at least one node passed), no_fit (every node "
        "failed), invalid_pod (the pod's kvspread fields are invalid).",
        "extender",
    ),
    _entry(
        names.EXTENDER_PRIORITIZE_DECISIONS,
        ("outcome",),
        "Prioritize calls by outcome: placed (a best node was picked), no_fit (no node "
        "fits), no_gpu (no known node to score), invalid_pod.",
        "extender",
    ),
    _entry(
        names.ADAPTER_REQUESTS,
        ("kind", "code"),
        "API requests by route kind (read, discovery, health, other) and HTTP status code.",
        "adapter",
    ),
    _entry(
        names.ADAPTER_REQUEST_DURATION,
        (),
        "External-metrics API request latency.",
        "adapter",
    ),
    _entry(
        names.ADAPTER_SERIES,
        (),
        "Series held by the OTLP source's windowed store.",
        "adapter",
    ),
    _entry(
        names.ADAPTER_SERIES_DROPPED,
        (),
        "Series evicted because the store was full (LRU).",
        "adapter",
    ),
    _entry(
        names.ADAPTER_OTLP_POINTS,
        (),
        "OTLP data points stored.",
        "adapter",
    ),
    _entry(
        names.ADAPTER_STALE_READS,
        ("metric",),
        "Metric reads that found no fresh data: matching series, none newer than the staleness limit or too few points in the window (docs/adapter.md).",
        "adapter",
    ),
    _entry(
        names.ADAPTER_REFUSED_READS,
        ("metric", "reason"),
        "Quantile and over-ratio reads refused because the histogram buckets cannot bound the value (reason: overflow_bucket, zero_bucket, wide_bucket for a quantile; threshold_not_a_bound for an over-ratio threshold inside a bucket; docs/adapter.md).",
        "adapter",
    ),
    _entry(
        names.ADAPTER_GUARD_HOLDS,
        ("metric",),
        "SLO pressure reads whose served value the scale-down guard raised, holding replicas a recent pressure over 1 showed too few for the rate per replica now (metricLabels.term guard; docs/adapter.md, SLO pressure).",
        "adapter",
    ),
    _entry(
        names.ADAPTER_GUARD_VIOLATIONS,
        ("metric",),
        "SLO pressure reads over 1 with a replica count and a request rate, which the scale-down guard remembers for its window (docs/adapter.md, SLO pressure).",
        "adapter",
    ),
    _entry(
        names.ADAPTER_CONNECTIONS,
        ("port",),
        "Connections served now on the HTTPS API (port=api) and the OTLP receiver (port=otlp); at max_connections (otlp_max_connections) more are refused.",
        "adapter",
    ),
    _entry(
        names.ADAPTER_CONNECTIONS_REFUSED,
        ("port",),
        "Connections refused with 503 (or closed unanswered past 256 refusals at once) because the port served its max_connections (otlp_max_connections on the OTLP port) and none of them was idle.",
        "adapter",
    ),
    _entry(
        names.ADAPTER_CONNECTIONS_EVICTED,
        ("port",),
        "Idle connections (waiting for a request's first byte) closed to admit a new one at max_connections (otlp_max_connections on the OTLP port), and on the API port TLS handshakes closed to admit a new one past 128 going on at once; a steady rate means something holds connections open without using them.",
        "adapter",
    ),
)


def _router(d: names.MetricDescriptor, labels: tuple[str, ...], help: str) -> Metric:
    return _entry(d, labels, help, "router")


_ROUTER: Final = (
    _router(
        names.ROUTER_PICKS,
        ("endpoint", "reason"),
        "Endpoint picks by endpoint and reason (context, cache, score, saturated, stale, "
        "no-endpoint, shed); `endpoint` is empty for no-endpoint and shed. A body that cannot "
        "be parsed is no pick: it counts in `kvspread_router_bad_requests_total`.",
    ),
    _router(
        names.ROUTER_PICK_DURATION,
        (),
        "Time from the complete request body to the decision.",
    ),
    _router(
        names.ROUTER_STALE_ENDPOINTS,
        (),
        "Endpoints whose engine metrics are stale (set when /metrics is read).",
    ),
    _router(names.ROUTER_ENDPOINTS, (), "Endpoints in the set (set when /metrics is read)."),
    _router(names.ROUTER_SHEDS, (), "Requests refused with 429 because every endpoint is full."),
    _router(names.ROUTER_BAD_REQUESTS, (), "Request bodies refused with 400 (unparsable)."),
    _router(
        names.ROUTER_PREFIX_ENTRIES,
        (),
        "(endpoint, block) entries of the approximate prefix index.",
    ),
    _router(
        names.ROUTER_PREFIX_BYTES,
        (),
        "Memory estimate of the approximate prefix index, bounded by `cache.memory_mib`.",
    ),
    _router(
        names.ROUTER_CACHE_EVICTIONS,
        ("index",),
        "Entries the bounded cache indexes forgot (`index`: prefix, image).",
    ),
    _router(
        names.ROUTER_KV_EVENTS,
        ("outcome",),
        "KV-cache event messages read in precise mode (`outcome`: applied, bad, gap).",
    ),
    _router(
        names.ROUTER_GRPC_CONNECTIONS,
        (),
        "gRPC connections the h2 server (server.grpc_server: h2) serves now; at server.max_connections the one idle longest makes room for a new one, else the new one gets GOAWAY.",
    ),
    _router(
        names.ROUTER_GRPC_BUFFERED,
        (),
        "Bytes of partial gRPC messages and partial HTTP/2 frames the h2 server holds over all connections, against server.max_bodies_bytes (past it a stream gets RESOURCE_EXHAUSTED or a connection's reading pauses).",
    ),
    _router(
        names.ROUTER_GRPC_LIMITS,
        ("limit",),
        "Times a bound of the h2 server acted: connection_refused (GOAWAY to a new connection at server.max_connections, none idle), connection_evicted (an idle one closed to make room), read_paused (a connection's reading paused for the buffered bound), message_late (a message not whole within 30 s). docs/router.md, the limits against attacks.",
    ),
    _router(
        names.ROUTER_BODY_HELD,
        (),
        "Request body bytes held now, against the total body budget "
        "(`server.max_bodies_bytes`); at the budget new bodies get 429. Bytes are given back "
        "once the choice is made or the stream ends.",
    ),
    _router(
        names.ROUTER_BODY_REFUSALS,
        ("code",),
        "Request bodies refused over a body budget: `code` 413 (over the request's budget, "
        "`server.max_body_bytes`) or 429 (over the total budget, `server.max_bodies_bytes`). "
        "Both series are served from the start, at 0.",
    ),
    _router(
        names.ROUTER_SERVED_ELSEWHERE,
        (),
        "Requests the gateway reported served by another pool endpoint than the one picked "
        "(a retry down the fallback list); their load was moved to the endpoint that served. "
        "Counts only when the gateway sends the response headers (docs/router.md, Served "
        "endpoint).",
    ),
)

_LLMD_SOURCE: Final = (
    "llm-d's family (llm-d-router pkg/epp/metrics/llm_d_router_metrics.go), served by the "
    "picker beside its own so llm-d's dashboards read it (router/llmdmetrics.py)."
)
_LLMD: Final = (
    _router(
        names.LLMD_REQUESTS,
        names.LLMD_REQUEST_LABELS,
        "Requests routed: `model_name` = `target_model_name` (the body's `model`; the picker "
        "rewrites none), `fairness_id` and `priority` from the request's objective headers. "
        + _LLMD_SOURCE,
    ),
    _router(
        names.LLMD_REQUEST_ERRORS,
        (*names.LLMD_REQUEST_LABELS, "error_code"),
        "Requests refused: `error_code` BadRequest (400), ResourceExhausted (429), "
        "ServiceUnavailable (503). Body-budget refusals (413, 429 over the total budget) are in "
        "`kvspread_router_body_refusals_total` only. " + _LLMD_SOURCE,
    ),
    _router(
        names.LLMD_SCHEDULER_DURATION,
        (),
        "Time of the choice (cache lookup and scoring, not the body parse), llm-d's buckets "
        "0.1 ms to 100 ms; also for a choice that found no endpoint. " + _LLMD_SOURCE,
    ),
    _router(
        names.LLMD_SCHEDULER_ATTEMPTS,
        names.LLMD_ATTEMPT_LABELS,
        "Choices: `status` success with the endpoint (`endpoint_name` `pod-rank-i`, or the "
        "address of a static endpoint; its `namespace` and `port`), failure (no eligible "
        "endpoint) with the endpoint labels empty. " + _LLMD_SOURCE,
    ),
    _router(
        names.LLMD_READY_ENDPOINTS,
        names.LLMD_POOL_LABELS,
        "Endpoints of the pool (`name`: the InferencePool, empty without one) with fresh "
        "engine metrics; set when /metrics is read. " + _LLMD_SOURCE,
    ),
    _router(
        names.LLMD_AVG_KV_CACHE,
        names.LLMD_POOL_LABELS,
        "Mean KV-cache usage (0..1) over the fresh endpoints that report it; unchanged while "
        "none is fresh. " + _LLMD_SOURCE,
    ),
    _router(
        names.LLMD_AVG_QUEUE,
        names.LLMD_POOL_LABELS,
        "Mean requests waiting in the engines of the fresh endpoints. " + _LLMD_SOURCE,
    ),
    _router(
        names.LLMD_AVG_RUNNING,
        names.LLMD_POOL_LABELS,
        "Mean requests running in the engines of the fresh endpoints. " + _LLMD_SOURCE,
    ),
    _router(
        names.LLMD_SD_KV_CACHE,
        names.LLMD_POOL_LABELS,
        "Standard deviation of the fresh endpoints' KV-cache usage. " + _LLMD_SOURCE,
    ),
    _router(
        names.LLMD_SD_QUEUE,
        names.LLMD_POOL_LABELS,
        "Standard deviation of the fresh endpoints' waiting requests. " + _LLMD_SOURCE,
    ),
    _router(
        names.LLMD_SD_RUNNING,
        names.LLMD_POOL_LABELS,
        "Standard deviation of the fresh endpoints' running requests. " + _LLMD_SOURCE,
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

CATALOG: Final[tuple[Metric, ...]] = _COLLECTOR + _SELF + _ROUTER + _LLMD + _KSM


def by_name(name: str) -> Metric:
    """The catalogue entry for a Prometheus family name; KeyError names the metric."""
    for m in CATALOG:
        if m.name == name:
            return m
    raise KeyError(f"metric {name!r} is not in the kvspread catalogue")
