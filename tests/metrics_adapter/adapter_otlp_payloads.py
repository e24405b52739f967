"""Build OTLP ExportMetricsServiceRequest messages with exact timestamps (tests, bench)."""

from __future__ import annotations

from collections.abc import Sequence

import httpx
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as mp

CUMULATIVE = mp.AGGREGATION_TEMPORALITY_CUMULATIVE
DELTA = mp.AGGREGATION_TEMPORALITY_DELTA


def kvs(attrs: dict[str, str | int]) -> list[KeyValue]:
    out = []
    for k, v in attrs.items():
        av = AnyValue(int_value=v) if isinstance(v, int) else AnyValue(string_value=v)
        out.append(KeyValue(key=k, value=av))
    return out


def request(
    resource: dict[str, str | int], metrics: Sequence[mp.Metric]
) -> ExportMetricsServiceRequest:
    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    rm.resource.attributes.extend(kvs(resource))
    sm = rm.scope_metrics.add()
    sm.scope.name = "test"
    sm.metrics.extend(metrics)
    return req


def histogram(
    name: str,
    points: Sequence[tuple[float, float, Sequence[int], dict[str, str | int]]],
    bounds: Sequence[float],
    temporality: int = CUMULATIVE,
    mean: float | None = None,
) -> mp.Metric:
    """points: (start_s, time_s, bucket_counts, attributes); `mean` sets each point's sum
    to mean x count (no sum without it)."""
    m = mp.Metric(name=name, unit="s")
    m.histogram.aggregation_temporality = temporality
    for start, t, counts, attrs in points:
        dp = m.histogram.data_points.add()
        dp.start_time_unix_nano = int(start * 1e9)
        dp.time_unix_nano = int(t * 1e9)
        dp.explicit_bounds.extend(bounds)
        dp.bucket_counts.extend(counts)
        dp.count = sum(counts)
        if mean is not None:
            dp.sum = mean * dp.count
        dp.attributes.extend(kvs(attrs))
    return m


def counter(
    name: str,
    points: Sequence[tuple[float, float, float, dict[str, str | int]]],
    temporality: int = CUMULATIVE,
    monotonic: bool = True,
) -> mp.Metric:
    m = mp.Metric(name=name)
    m.sum.aggregation_temporality = temporality
    m.sum.is_monotonic = monotonic
    for start, t, v, attrs in points:
        dp = m.sum.data_points.add()
        dp.start_time_unix_nano = int(start * 1e9)
        dp.time_unix_nano = int(t * 1e9)
        dp.as_double = v
        dp.attributes.extend(kvs(attrs))
    return m


def gauge(name: str, points: Sequence[tuple[float, float, dict[str, str | int]]]) -> mp.Metric:
    m = mp.Metric(name=name)
    for t, v, attrs in points:
        dp = m.gauge.data_points.add()
        dp.time_unix_nano = int(t * 1e9)
        dp.as_double = v
        dp.attributes.extend(kvs(attrs))
    return m


def post(port: int, req: ExportMetricsServiceRequest) -> None:
    """`req` as OTLP/HTTP protobuf to a receiver on 127.0.0.1:`port`; it must answer 200."""
    r = httpx.post(f"http://127.0.0.1:{port}/v1/metrics", content=req.SerializeToString(),
                   headers={"content-type": "application/x-protobuf"})  # fmt: skip
    assert r.status_code == 200, r.text
