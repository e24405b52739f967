"""Real OpenTelemetry SDK pipelines for the tests: MeterProvider -> exporter -> adapter."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import Meter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource

DURATION_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
"""The semantic-convention advisory bounds for http.server.request.duration."""


class RecordingExporter(MetricExporter):
    """Delegates to a real exporter and keeps what was sent (to know the exact timestamps)."""

    def __init__(self, inner: MetricExporter) -> None:
        super().__init__(
            preferred_temporality=dict(inner._preferred_temporality),
            preferred_aggregation=dict(inner._preferred_aggregation),
        )
        self.inner = inner
        self.sent: list[MetricsData] = []
        self.results: list[MetricExportResult] = []

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kw: Any
    ) -> MetricExportResult:
        self.sent.append(metrics_data)
        r = self.inner.export(metrics_data, timeout_millis=timeout_millis)
        self.results.append(r)
        return r

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kw: Any) -> None:
        self.inner.shutdown()


def provider(
    exporter: MetricExporter, resource: dict[str, str], bounds: Sequence[float] = DURATION_BOUNDS
) -> tuple[MeterProvider, PeriodicExportingMetricReader]:
    """A MeterProvider that exports only when flushed (interval of one hour)."""
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    view = View(
        instrument_name="http.server.request.duration",
        aggregation=ExplicitBucketHistogramAggregation(boundaries=list(bounds)),
    )
    mp = MeterProvider(resource=Resource.create(resource), metric_readers=[reader], views=[view])
    return mp, reader


def otlp_exporter(port: int, host: str = "127.0.0.1") -> OTLPMetricExporter:
    return OTLPMetricExporter(endpoint=f"http://{host}:{port}/v1/metrics", timeout=5)


def push_once(
    port: int,
    resource: dict[str, str],
    bounds: Mapping[str, Sequence[float]],
    record: Callable[[Meter], None],
) -> None:
    """One collector push: the real SDK, a view of explicit `bounds` per histogram name,
    `record(meter)` making the observations, one flush through the real OTLP/HTTP exporter
    to the adapter on `port`, asserted delivered."""
    exp = RecordingExporter(otlp_exporter(port))
    reader = PeriodicExportingMetricReader(exp, export_interval_millis=3_600_000)
    views = [
        View(instrument_name=name, aggregation=ExplicitBucketHistogramAggregation(list(b)))
        for name, b in bounds.items()
    ]
    mp = MeterProvider(resource=Resource.create(resource), metric_readers=[reader], views=views)
    record(mp.get_meter("t"))
    reader.force_flush()
    mp.shutdown()
    assert exp.results and all(r.name == "SUCCESS" for r in exp.results)
