"""Exporters: Prometheus exposition built at scrape time, and OTLP/HTTP push.

Names, units and help come from the `kvspread.names` descriptors (OTel names over OTLP,
their `.prometheus` names in the exposition). Label names are the OTel attribute names with
`.` as `_`.
The OTLP side uses the real opentelemetry-sdk: request histograms are recorded as
requests complete, gauges are observed at export time; several endpoints go through
`bpf.fanout.FanoutMetricExporter`. A failed export is logged and counted by the
SDK/fanout, never fatal.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from opentelemetry.sdk.metrics import Histogram as SdkHistogram
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    HistogramDataPoint,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.metrics.export import Histogram as OtelHistogram
from opentelemetry.sdk.metrics.export import Metric as OtelMetric
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from bpf.state import CollectorState
from bpf.stats import DURATION_BUCKETS, QUEUE_BUCKETS, HistogramState, HistogramTable
from kvspread import names

__all__ = [
    "HISTOGRAMS",
    "PrometheusCollector",
    "OtlpExporter",
    "label_name",
    "gpu_memory_points",
    "dcgm_fb_used_points",
    "REQUEST_ATTRS",
    "TOKEN_ATTRS",
    "GEN_AI_OPERATIONS",
    "GEN_AI_PROVIDERS",
    "otlp_attributes",
]

REQUEST_ATTRS: tuple[str, ...] = (
    names.ATTR_HTTP_METHOD,
    names.ATTR_HTTP_STATUS,
    names.ATTR_HTTP_ROUTE,
    names.ATTR_SERVER_PORT,
    names.ATTR_K8S_NAMESPACE,
    names.ATTR_K8S_POD,
    names.ATTR_MODALITY,
    names.ATTR_SERVICE_NAME,
    names.ATTR_QOS,
)
"""Attributes of http.server.request.duration, in label-tuple order."""

TOKEN_ATTRS: tuple[str, ...] = (
    *REQUEST_ATTRS,
    names.ATTR_GEN_AI_OPERATION,
    names.ATTR_GEN_AI_PROVIDER,
    names.ATTR_GEN_AI_REQUEST_MODEL,
)
"""Attributes of the gen_ai.server token histograms: the request's, plus the GenAI operation,
provider (the API flavour) and the model the request names (bpf/model.py; "" when unread)."""

GEN_AI_OPERATIONS: dict[str, str] = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "chat",
    "/v1/completions": "text_completion",
    "/generate_stream": "text_completion",
    "/v2/models/{model}/generate_stream": "text_completion",
}
"""gen_ai.operation.name of the streaming routes (OTel GenAI semconv values); others ""."""

GEN_AI_PROVIDERS: dict[str, str] = {
    "/v1/chat/completions": "openai",
    "/v1/responses": "openai",
    "/v1/completions": "openai",
    "/generate_stream": "huggingface.tgi",
    "/v2/models/{model}/generate_stream": "nvidia.triton",
}
"""gen_ai.provider.name per streaming route: the API the route belongs to (the semconv's
"telemetry format flavor"): `openai` is its well-known value; TGI and Triton have none, so
custom values; others "". Who runs the model is in llm.engine, not here. The well-known
values (open-telemetry/semantic-conventions-genai, model/gen-ai/registry.yaml, where the
GenAI conventions moved from semantic-conventions) are hosted APIs only (openai, anthropic,
aws.bedrock, gcp.*, azure.*, ...): none for vLLM, SGLang, TGI or Triton."""

POD_ATTRS = (names.ATTR_SERVER_PORT, names.ATTR_K8S_NAMESPACE, names.ATTR_K8S_POD)

HISTOGRAMS: tuple[
    tuple[names.MetricDescriptor, Sequence[float], Callable[[CollectorState], HistogramTable]],
    ...,
] = (
    (names.HTTP_SERVER_REQUEST_DURATION, DURATION_BUCKETS, lambda s: s.requests),
    (names.HTTP_SERVER_TIME_TO_FIRST_BYTE, DURATION_BUCKETS, lambda s: s.ttfb),
    (names.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN, names.GEN_AI_TTFT_BUCKETS, lambda s: s.ttft),
    (names.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN, names.GEN_AI_TPOT_BUCKETS, lambda s: s.tpot),
    (
        names.GEN_AI_SERVER_NORMALIZED_LATENCY,
        names.NORMALIZED_LATENCY_BUCKETS,
        lambda s: s.normalized,
    ),
    (names.ACCEPT_QUEUE_DELAY, QUEUE_BUCKETS, lambda s: s.accept_delay),
)
"""The request histograms: descriptor, bucket bounds (the /metrics families and the OTLP
views alike) and where `CollectorState` keeps the counts."""


def gpu_memory_points(state: CollectorState) -> list[tuple[dict[str, str], int]]:
    """kvspread.gpu.memory.used: each GPU's figure, then its breakdown per pod (owner
    `pod`) and for the processes in no pod (owner `no_pod`). Unknown memory has no point;
    no NVML, no points at all."""
    out: list[tuple[dict[str, str], int]] = []
    pods = state.gpu_pods
    for g in state.gpus or []:
        gpu = {names.ATTR_GPU_INDEX: str(g.index), names.ATTR_GPU_UUID: g.uuid}
        out.append((gpu, g.mem_used))
        for m in pods.get(g.index, ()):
            if m.used_bytes is None:
                continue
            part = {**gpu, names.ATTR_GPU_MEMORY_OWNER: "pod" if m.in_pod else "no_pod"}
            if m.in_pod:
                part[names.ATTR_K8S_POD_UID] = m.uid
                if m.name:
                    part[names.ATTR_K8S_NAMESPACE] = m.namespace
                    part[names.ATTR_K8S_POD] = m.name
            out.append((part, m.used_bytes))
    return out


def dcgm_fb_used_points(state: CollectorState, node: str) -> list[tuple[list[str], float]]:
    """DCGM_FI_DEV_FB_USED per pod (labels in `names.DCGM_LABELS` order, value in MiB): the
    pods of `gpu_memory_points` whose name the pod table knows; no pod, no point."""
    out: list[tuple[list[str], float]] = []
    pods = state.gpu_pods
    for g in state.gpus or []:
        for m in pods.get(g.index, ()):
            if m.used_bytes is None or not m.in_pod or not m.name:
                continue
            labels = [str(g.index), g.uuid, g.name, node, m.name, m.namespace, ""]
            out.append((labels, m.used_bytes / _MIB))
    return out


_MIB = 1 << 20


def label_name(attr: str) -> str:
    return attr.replace(".", "_")


_Family = TypeVar("_Family", GaugeMetricFamily, CounterMetricFamily, HistogramMetricFamily)


def _family(cls: type[_Family], d: names.MetricDescriptor, *attrs: str) -> _Family:
    """An empty family of descriptor `d`, one label per attribute (dots become `_`)."""
    return cls(d.prometheus, d.help, labels=[label_name(a) for a in attrs])


def _hist(
    d: names.MetricDescriptor, table: dict[Any, HistogramState], bounds: Sequence[float]
) -> Metric:
    keys = next(iter(table), ())
    fam = _family(HistogramMetricFamily, d, *(k for k, _ in keys))
    for labels, st in table.items():
        cum = st.cumulative()
        buckets = [(repr(float(b)), cum[i]) for i, b in enumerate(bounds)] + [("+Inf", cum[-1])]
        fam.add_metric([v for _, v in labels], buckets, st.total)
    return fam


def tcp_by_pod(
    state: CollectorState, table: dict[tuple[int, int], Any] | None = None
) -> dict[tuple[str, str, str], Any]:
    """Kernel (tgid, port) TCP statistics (or another table of the same layout: the
    unsampled-request histogram) summed per (port, namespace, pod)."""
    from bpf.events import TcpStats

    out: dict[tuple[str, str, str], TcpStats] = {}
    resolve = state.pod_of_pid
    for (tgid, port), st in list((state.tcp if table is None else table).items()):
        ref = resolve(tgid) if resolve else None
        key = (str(port), getattr(ref, "namespace", ""), getattr(ref, "name", ""))
        prev = out.get(key)
        if prev is None:
            out[key] = st
        else:
            out[key] = TcpStats(
                prev.rtt_count + st.rtt_count,
                prev.rtt_sum_us + st.rtt_sum_us,
                prev.retransmits + st.retransmits,
                tuple(a + b for a, b in zip(prev.rtt_slots, st.rtt_slots, strict=True)),
            )
    return out


def _log2_buckets(slots: Sequence[int]) -> list[tuple[str, float]]:
    """Cumulative buckets of kernel log2 slots (slot i: [2^i, 2^(i+1)) microseconds)."""
    cum = 0
    buckets: list[tuple[str, float]] = []
    for i, c in enumerate(slots):
        cum += c
        buckets.append((repr(float(2 ** (i + 1)) / 1e6), cum))
    buckets.append(("+Inf", cum))
    return buckets


class PrometheusCollector:
    """prometheus_client collector reading `CollectorState` on every scrape."""

    def __init__(self, state: CollectorState, node: str = "") -> None:
        self.state = state
        self.node = node

    def describe(self) -> list[Metric]:
        return []  # unchecked collector: families depend on what was measured

    def collect(self) -> Iterator[Metric]:
        for descriptor, buckets, hist in HISTOGRAMS:
            yield _hist(descriptor, hist(self.state).snapshot(), buckets)
        yield from self._tcp()
        yield from self._gpu()
        yield from self._engines()
        yield from self._node()
        yield from self._self()

    def _tcp(self) -> Iterator[Metric]:
        s = self.state
        backlog = _family(
            GaugeMetricFamily, names.ACCEPT_QUEUE_BACKLOG, names.ATTR_SERVER_PORT, "limit"
        )
        for port, (length, limit) in sorted(list(s.backlog.items())):
            backlog.add_metric([str(port), str(limit)], length)
        yield backlog
        edges = _family(
            CounterMetricFamily,
            names.CONNECTION_EDGES,
            names.ATTR_CLIENT_ADDRESS,
            names.ATTR_CLIENT_POD,
            *POD_ATTRS,
        )
        for labels, v in s.edges.snapshot().items():
            edges.add_metric([x for _, x in labels], v)
        yield edges
        rtt = _family(HistogramMetricFamily, names.TCP_RTT, *POD_ATTRS)
        retrans = _family(CounterMetricFamily, names.TCP_RETRANSMITS, *POD_ATTRS)
        for pod, st in tcp_by_pod(self.state).items():
            rtt.add_metric(list(pod), _log2_buckets(st.rtt_slots), st.rtt_sum_us / 1e6)
            retrans.add_metric(list(pod), st.retransmits)
        yield rtt
        yield retrans
        unsampled = _family(HistogramMetricFamily, names.HTTP_SERVER_UNSAMPLED_DURATION, *POD_ATTRS)
        for pod, st in tcp_by_pod(self.state, self.state.unsampled).items():
            unsampled.add_metric(list(pod), _log2_buckets(st.rtt_slots), st.rtt_sum_us / 1e6)
        yield unsampled

    def _gpu(self) -> Iterator[Metric]:
        gpus = self.state.gpus
        if gpus is None:
            return  # absent, never zeros
        gpu = (names.ATTR_GPU_INDEX, names.ATTR_GPU_UUID)
        # one family, label sets per point: the GPU's own figure carries only its GPU labels
        used = GaugeMetricFamily(names.GPU_MEMORY_USED.prometheus, names.GPU_MEMORY_USED.help)
        total = _family(GaugeMetricFamily, names.GPU_MEMORY_TOTAL, *gpu)
        util = _family(GaugeMetricFamily, names.GPU_UTILIZATION, *gpu)
        for attrs, value in gpu_memory_points(self.state):
            used.add_sample(used.name, {label_name(k): v for k, v in attrs.items()}, value)
        for g in gpus:
            v = [str(g.index), g.uuid]
            total.add_metric(v, g.mem_total)
            if g.util is not None:
                util.add_metric(v, g.util)
        d = names.DCGM_FB_USED
        dcgm = GaugeMetricFamily(d.prometheus, d.help, labels=list(names.DCGM_LABELS))
        for labels, mib in dcgm_fb_used_points(self.state, self.node):
            dcgm.add_metric(labels, mib)
        yield from (used, total, util, dcgm)

    def _engines(self) -> Iterator[Metric]:
        inst = (names.ATTR_ENGINE, names.ATTR_MODEL, names.ATTR_K8S_NAMESPACE, names.ATTR_K8S_POD)
        kv = _family(GaugeMetricFamily, names.KV_CACHE_USAGE, *inst)
        run = _family(GaugeMetricFamily, names.ENGINE_REQUESTS_RUNNING, *inst)
        wait = _family(GaugeMetricFamily, names.ENGINE_REQUESTS_WAITING, *inst)
        for r in list(self.state.engines.values()):
            for e in r.samples:
                v = [e.engine, e.model, r.namespace, r.pod]
                if e.kv_usage is not None:
                    kv.add_metric(v, e.kv_usage)
                if e.running is not None:
                    run.add_metric(v, e.running)
                if e.waiting is not None:
                    wait.add_metric(v, e.waiting)
        yield from (kv, run, wait)

    def _node(self) -> Iterator[Metric]:
        s = self.state
        for d, value in (
            (names.NODE_FRAGMENTATION, s.fragmentation),
            (
                names.NODE_LARGEST_FREE_EXTENT,
                None if s.largest_free_mib is None else s.largest_free_mib * 1024 * 1024,
            ),
            (names.NODE_ACTIVE_STREAMS, s.streams),
            (names.NODE_IMAGE_TOKEN_SHARE, s.image_share),
        ):
            if value is None:
                continue
            fam = _family(GaugeMetricFamily, d, names.ATTR_K8S_NODE)
            fam.add_metric([self.node], value)
            yield fam

    def _self(self) -> Iterator[Metric]:
        s = self.state
        up = _family(GaugeMetricFamily, names.COLLECTOR_SOURCE_UP, "source")
        with s.lock:
            sources = dict(s.sources)
            events = dict(s.events)
            dropped = dict(s.dropped)
            models = dict(s.models)
        for name, st in sorted(sources.items()):
            up.add_metric([name], 1.0 if st.up else 0.0)
        yield up
        ev = _family(CounterMetricFamily, names.COLLECTOR_EVENTS, "program")
        for k, v in sorted(events.items()):
            ev.add_metric([k], v)
        yield ev
        dr = _family(CounterMetricFamily, names.COLLECTOR_DROPPED, "reason")
        for k, v in sorted(dropped.items()):
            dr.add_metric([k], v)
        yield dr
        rm = _family(CounterMetricFamily, names.COLLECTOR_REQUEST_MODELS, "outcome")
        for k, v in sorted(models.items()):
            rm.add_metric([k], v)
        yield rm


def otlp_attributes(labels: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """OTLP attributes of a label set: the non-empty values, status code and port as
    integers (the Prometheus labels are all strings, empty when unknown)."""
    attrs: dict[str, Any] = {}
    for k, v in labels:
        if v == "":
            continue
        attrs[k] = int(v) if k in _INT_ATTRS and v.isdigit() else v
    return attrs


_INT_ATTRS = frozenset((names.ATTR_HTTP_STATUS, names.ATTR_SERVER_PORT))


class _TableHistograms(MetricExporter):
    """The OTLP exporter, plus the request histograms read from the collector's own
    tables at each export (cumulative, as the Prometheus side serves them): requests
    cost no OTel SDK call each (attribute cleaning and hashing per record was as much CPU
    as the rest of the request path)."""

    TABLES = (
        (names.HTTP_SERVER_REQUEST_DURATION, "requests"),
        (names.HTTP_SERVER_TIME_TO_FIRST_BYTE, "ttfb"),
    )

    def __init__(self, inner: MetricExporter, state: CollectorState) -> None:
        super().__init__(
            preferred_temporality=dict(inner._preferred_temporality or {}),
            preferred_aggregation=dict(inner._preferred_aggregation or {}),
        )
        self.inner = inner
        self.state = state
        self.start_ns = time.time_ns()

    def metrics(self, now_ns: int) -> list[OtelMetric]:
        out = []
        for d, attr in self.TABLES:
            table: HistogramTable = getattr(self.state, attr)
            points = [
                HistogramDataPoint(
                    attributes=otlp_attributes(labels),
                    start_time_unix_nano=self.start_ns,
                    time_unix_nano=now_ns,
                    count=st.count,
                    sum=st.total,
                    bucket_counts=list(st.buckets),
                    explicit_bounds=list(table.bounds),
                    min=st.min,
                    max=st.max,
                )
                for labels, st in table.snapshot().items()
                if st.count
            ]
            if points:
                hist = OtelHistogram(points, AggregationTemporality.CUMULATIVE)
                out.append(OtelMetric(d.name, d.help, d.unit, hist))
        return out

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        ours = self.metrics(time.time_ns())
        if ours and metrics_data.resource_metrics:
            first, *rest = metrics_data.resource_metrics
            scopes = list(first.scope_metrics)
            if scopes:
                scopes[0] = ScopeMetrics(
                    scopes[0].scope, [*scopes[0].metrics, *ours], scopes[0].schema_url
                )
            first = ResourceMetrics(first.resource, scopes, first.schema_url)
            metrics_data = MetricsData([first, *rest])
        return self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.inner.shutdown(timeout_millis=timeout_millis, **kwargs)


class OtlpExporter:
    """OTel SDK meter provider pushing to the configured OTLP/HTTP endpoints.

    The request-duration and time-to-first-byte histograms come from the collector's
    tables at export time (`_TableHistograms`) when the exporter takes cumulative
    histograms (the OTLP default); with delta temporality they are recorded per request
    through the SDK (`per_request`)."""

    def __init__(
        self,
        state: CollectorState,
        endpoints: Sequence[str],
        interval_s: float,
        resource_attrs: dict[str, str],
        exporter: Any = None,
    ) -> None:
        from opentelemetry.metrics import CallbackOptions, Observation
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
        from opentelemetry.sdk.resources import Resource

        from bpf.fanout import FanoutMetricExporter

        self.state = state
        self.exporter = exporter or FanoutMetricExporter(list(endpoints))
        prefers = (self.exporter._preferred_temporality or {}).get(SdkHistogram)
        self.per_request = prefers == AggregationTemporality.DELTA
        pushed = self.exporter if self.per_request else _TableHistograms(self.exporter, state)
        self.reader = PeriodicExportingMetricReader(
            pushed, export_interval_millis=int(interval_s * 1000)
        )
        views = [
            View(
                instrument_name=descriptor.name,
                aggregation=ExplicitBucketHistogramAggregation(buckets),
            )
            for descriptor, buckets, _ in HISTOGRAMS
        ]
        self.provider = MeterProvider(
            resource=Resource.create(resource_attrs), metric_readers=[self.reader], views=views
        )
        meter = self.provider.get_meter("kvspread.collector")

        def histogram(d: names.MetricDescriptor) -> Any:
            return meter.create_histogram(d.name, unit=d.unit)

        self.duration = histogram(names.HTTP_SERVER_REQUEST_DURATION)
        self.ttfb = histogram(names.HTTP_SERVER_TIME_TO_FIRST_BYTE)
        self.accept = histogram(names.ACCEPT_QUEUE_DELAY)
        self.ttft = histogram(names.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN)
        self.tpot = histogram(names.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN)
        self.normalized = histogram(names.GEN_AI_SERVER_NORMALIZED_LATENCY)

        def gpu(attr: str) -> Any:
            def cb(_: CallbackOptions) -> list[Observation]:
                out = []
                for g in self.state.gpus or []:
                    v = getattr(g, attr)
                    if v is not None:
                        out.append(
                            Observation(
                                v, {names.ATTR_GPU_INDEX: g.index, names.ATTR_GPU_UUID: g.uuid}
                            )
                        )
                return out

            return cb

        def gpu_memory(_: CallbackOptions) -> list[Observation]:
            return [
                Observation(
                    v,
                    {k: int(x) if k == names.ATTR_GPU_INDEX else x for k, x in attrs.items()},
                )
                for attrs, v in gpu_memory_points(self.state)
            ]

        def engine(attr: str) -> Any:
            def cb(_: CallbackOptions) -> list[Observation]:
                out = []
                for r in list(self.state.engines.values()):
                    for e in r.samples:
                        v = getattr(e, attr)
                        if v is not None:
                            out.append(
                                Observation(
                                    v,
                                    {
                                        names.ATTR_ENGINE: e.engine,
                                        names.ATTR_MODEL: e.model,
                                        names.ATTR_K8S_NAMESPACE: r.namespace,
                                        names.ATTR_K8S_POD: r.pod,
                                        **(
                                            {names.ATTR_SERVICE_NAME: r.service}
                                            if r.service
                                            else {}
                                        ),
                                    },
                                )
                            )
                return out

            return cb

        def node(attr: str, scale: float = 1.0) -> Any:
            def cb(_: CallbackOptions) -> list[Observation]:
                v = getattr(self.state, attr)
                return [] if v is None else [Observation(v * scale)]

            return cb

        def sources(_: CallbackOptions) -> list[Observation]:
            with self.state.lock:
                items = list(self.state.sources.items())
            return [Observation(1 if st.up else 0, {"source": k}) for k, st in items]

        def retransmits(_: CallbackOptions) -> list[Observation]:
            return [
                Observation(
                    st.retransmits,
                    {
                        names.ATTR_SERVER_PORT: int(port),
                        names.ATTR_K8S_NAMESPACE: ns,
                        names.ATTR_K8S_POD: pod,
                    },
                )
                for (port, ns, pod), st in tcp_by_pod(self.state).items()
            ]

        def edges(_: CallbackOptions) -> list[Observation]:
            return [
                Observation(int(v), {k: x for k, x in labels if x != ""})
                for labels, v in self.state.edges.snapshot().items()
            ]

        def observe(d: names.MetricDescriptor, callback: Any) -> None:
            """An observable counter or gauge, as the descriptor declares it."""
            if d.kind == "counter":
                meter.create_observable_counter(d.name, [callback], unit=d.unit)
            else:
                meter.create_observable_gauge(d.name, [callback], unit=d.unit)

        # The RTT histogram stays Prometheus-only: the kernel aggregates it into log2 slots
        # and the OTel SDK has no observable histogram to carry pre-aggregated buckets.
        observe(names.TCP_RETRANSMITS, retransmits)
        observe(names.CONNECTION_EDGES, edges)
        observe(names.GPU_MEMORY_USED, gpu_memory)
        observe(names.GPU_MEMORY_TOTAL, gpu("mem_total"))
        observe(names.GPU_UTILIZATION, gpu("util"))
        observe(names.KV_CACHE_USAGE, engine("kv_usage"))
        observe(names.ENGINE_REQUESTS_RUNNING, engine("running"))
        observe(names.ENGINE_REQUESTS_WAITING, engine("waiting"))
        observe(names.NODE_FRAGMENTATION, node("fragmentation"))
        observe(names.NODE_LARGEST_FREE_EXTENT, node("largest_free_mib", 1024 * 1024))
        observe(names.NODE_ACTIVE_STREAMS, node("streams"))
        observe(names.NODE_IMAGE_TOKEN_SHARE, node("image_share"))
        observe(names.COLLECTOR_SOURCE_UP, sources)

    def record_request(self, attrs: dict[str, Any], duration_s: float, ttfb_s: float) -> None:
        self.duration.record(duration_s, attrs)
        self.ttfb.record(ttfb_s, attrs)

    def record_tokens(
        self,
        attrs: dict[str, Any],
        ttft_s: float,
        tpot_s: float | None,
        normalized_s: float | None = None,
    ) -> None:
        """One SSE stream's time to first token, with two tokens or more its time per
        token, and its duration per output token (normalized latency)."""
        self.ttft.record(ttft_s, attrs)
        if tpot_s is not None:
            self.tpot.record(tpot_s, attrs)
        if normalized_s is not None:
            self.normalized.record(normalized_s, attrs)

    def record_accept(self, attrs: dict[str, Any], delay_s: float) -> None:
        self.accept.record(delay_s, attrs)

    def flush(self) -> bool:
        return self.provider.force_flush(10_000)

    def shutdown(self) -> None:
        try:
            self.provider.shutdown()
        except Exception:  # noqa: BLE001 - second shutdown or exporter failure
            pass
