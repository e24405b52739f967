"""A fake OTLP endpoint for the tests and benchmarks that run a real OpenTelemetry SDK
pipeline but have no collector to send to."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import Histogram
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)

__all__ = ["FakeOtlpExporter"]


class FakeOtlpExporter(MetricExporter):
    """Accepts every export and keeps it in `got`; `keep=False` drops it instead (a
    benchmark that exports for a long time). `delta` asks the SDK for delta histograms."""

    def __init__(self, delta: bool = False, keep: bool = True) -> None:
        t = AggregationTemporality.DELTA if delta else AggregationTemporality.CUMULATIVE
        super().__init__(preferred_temporality={Histogram: t})
        self.keep = keep
        self.got: list[MetricsData] = []

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kw: Any
    ) -> MetricExportResult:
        if self.keep:
            self.got.append(metrics_data)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kw: Any) -> None:
        pass
