"""Quantiles are served only from buckets that can bound them (docs/adapter.md, "Coarse
histograms"), tested with the real OTel SDK and its real default buckets."""

from __future__ import annotations

import logging
import math
import random

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics._internal.aggregation import (
    _DEFAULT_EXPLICIT_BUCKET_HISTOGRAM_AGGREGATION_BOUNDARIES as SDK_BOUNDS,
)
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import (
    ExplicitBucketHistogramAggregation,
    ExponentialBucketHistogramAggregation,
    View,
)
from opentelemetry.sdk.resources import Resource

from kvspread import names
from metrics_adapter import sli
from metrics_adapter.rules import parse_rules
from metrics_adapter.server import AdapterThread
from metrics_adapter.sources.otlp_decode import SDK_DEFAULT_BOUNDS
from tests.metrics_adapter.adapter_otel_helpers import RecordingExporter, otlp_exporter, provider
from tests.metrics_adapter.adapter_testing import Pki, api_client, hpa_headers

NS = "llm"
P95 = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NS}/{names.SLI_LATENCY_P95}"
DOCS_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.12, 0.2, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5,
               10, 30, 60, 120)  # fmt: skip
"""docs/metrics.md, "Histogram buckets": what the refusal message tells users to use."""


def _samples(n: int = 500) -> list[float]:
    rng = random.Random(3)
    return [rng.uniform(0.2, 0.45) for _ in range(n)]  # requests of 0.2-0.45 s


def _push(port: int, service: str, views: list[View] | None, pushes: int = 1) -> None:
    """Record seconds with the real SDK and export them with its real OTLP exporter."""
    exp = RecordingExporter(otlp_exporter(port))
    reader = PeriodicExportingMetricReader(exp, export_interval_millis=3_600_000)
    res = Resource.create({names.ATTR_SERVICE_NAME: service, names.ATTR_K8S_NAMESPACE: NS})
    mp = MeterProvider(resource=res, metric_readers=[reader], views=views or [])
    hist = mp.get_meter("t").create_histogram(names.HTTP_SERVER_REQUEST_DURATION.name, unit="s")
    for _ in range(pushes):
        for v in _samples():
            hist.record(v, {names.ATTR_HTTP_STATUS: 200})
        reader.force_flush()
    mp.shutdown()
    assert exp.results and all(r.name == "SUCCESS" for r in exp.results)


def _get(c: httpx.Client, service: str) -> httpx.Response:
    return c.get(P95, params={"labelSelector": f"service={service}"}, headers=hpa_headers())


def test_the_default_bounds_are_the_sdks() -> None:
    assert tuple(SDK_BOUNDS) == SDK_DEFAULT_BOUNDS


def test_seconds_on_the_sdks_default_buckets_are_refused_and_logged_once(
    pki: Pki, adapter: AdapterThread, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="kvspread.adapter.otlp"):
        _push(adapter.adapter.otlp_port, "coarse", None, pushes=2)
    warned = [r for r in caplog.records if "default millisecond bucket bounds" in r.message]
    assert len(warned) == 1, "once per series, not once per push"
    with api_client(pki, adapter) as c:
        r = _get(c, "coarse")
        # the interpolated answer would be 4.75 s for requests of at most 0.45 s
        assert r.status_code == 422, r.text
        st = r.json()
        assert st["kind"] == "Status" and st["reason"] == "Invalid"
        msg = st["message"]
        assert "http.server.request.duration{" in msg and "service.name=coarse" in msg
        assert "(0, 5]" in msg and "[0, 5, 10, 25, 50" in msg
        assert "docs/metrics.md" in msg and "exponential histogram" in msg
        assert adapter.adapter.provider.refused_reads == {(names.SLI_LATENCY_P95, "zero_bucket"): 1}
        m = httpx.get(f"http://127.0.0.1:{adapter.adapter.otlp_port}/metrics").text
        line = (
            f'kvspread_adapter_refused_reads_total{{metric="{names.SLI_LATENCY_P95}",'
            'reason="zero_bucket"} 1.0'
        )
        assert line in m
        # the rates of the same histogram stay served: only the quantile cannot be bounded
        rps = c.get(
            P95.replace(names.SLI_LATENCY_P95, names.SLI_REQUESTS_PER_SECOND),
            params={"labelSelector": "service=coarse"},
            headers=hpa_headers(),
        )
        assert rps.status_code == 200 and rps.json()["items"]


@pytest.mark.parametrize("fix", ["docs-bounds", "exponential"])
def test_the_fixes_the_message_names_are_served(pki: Pki, adapter: AdapterThread, fix: str) -> None:
    port = adapter.adapter.otlp_port
    if fix == "exponential":
        views = [
            View(
                instrument_name=names.HTTP_SERVER_REQUEST_DURATION.name,
                aggregation=ExponentialBucketHistogramAggregation(),
            )
        ]
        _push(port, fix, views)
    else:
        mp_exp = RecordingExporter(otlp_exporter(port))
        mp, reader = provider(mp_exp, {names.ATTR_SERVICE_NAME: fix, names.ATTR_K8S_NAMESPACE: NS},
                              DOCS_BOUNDS)  # fmt: skip
        hist = mp.get_meter("t").create_histogram(names.HTTP_SERVER_REQUEST_DURATION.name, unit="s")
        for v in _samples():
            hist.record(v, {names.ATTR_HTTP_STATUS: 200})
        reader.force_flush()
        mp.shutdown()
    true = sorted(_samples())[math.ceil(0.95 * 500) - 1]
    with api_client(pki, adapter) as c:
        r = _get(c, fix)
        assert r.status_code == 200, r.text
        from kvspread.quantity import parse_quantity

        served = float(parse_quantity(r.json()["items"][0]["value"]))
        assert abs(served - true) / true < (0.6 if fix == "docs-bounds" else 0.05), served


def _h(bounds: tuple[float, ...], counts: tuple[float, ...]) -> sli.ExplicitHistogram:
    return sli.ExplicitHistogram(bounds, counts)


def test_refusal_reasons() -> None:
    ms = SDK_DEFAULT_BOUNDS
    coarse = _h(ms, (0, 100) + (0,) * 14)
    est = sli.histogram_quantile(0.95, coarse)
    assert est == pytest.approx(4.75)
    assert sli.quantile_refusal(0.95, coarse, est, 2.0) == ("zero_bucket", 0.0, 5.0)
    over = _h((1.0, 2.0), (0, 1, 9))
    assert sli.quantile_refusal(0.95, over, 2.0, 2.0) == ("overflow_bucket", 2.0, math.inf)
    wide = _h((10.0, 30.0), (0, 10, 0))  # est in (10, 30] near 10 -> width 20/10.x
    est = sli.histogram_quantile(0.01, wide)
    assert sli.quantile_refusal(0.01, wide, est, 1.5)[0] == "wide_bucket"  # type: ignore[index]
    assert sli.quantile_refusal(0.01, wide, est, 2.0) is None
    # the collector's own bounds (docs/metrics.md) are served anywhere above the first bucket
    for i in range(1, len(DOCS_BOUNDS)):
        counts = [0.0] * (len(DOCS_BOUNDS) + 1)
        counts[i] = 100.0
        h = _h(tuple(map(float, DOCS_BOUNDS)), tuple(counts))
        for q in (0.01, 0.5, 0.99):
            assert sli.quantile_refusal(q, h, sli.histogram_quantile(q, h), 2.0) is None, (i, q)


def test_limit_is_a_rule_key() -> None:
    (rule,) = parse_rules([{"name": "p", "metric": "m", "aggregation": "quantile",
                            "quantile": 0.5, "maxRelativeBucketWidth": 0.5}])  # fmt: skip
    assert rule.max_relative_bucket_width == 0.5
    (default,) = parse_rules(
        [{"name": "p", "metric": "m", "aggregation": "quantile", "quantile": 0.5}]
    )
    assert default.max_relative_bucket_width == 2.0
    from kvspread.settings import ConfigError

    with pytest.raises(ConfigError, match=r"rules\[0\]\.maxRelativeBucketWidth"):
        parse_rules(
            [{"name": "r", "metric": "m", "aggregation": "rate", "maxRelativeBucketWidth": 1}]
        )
    with pytest.raises(ConfigError, match=r"want a number > 0"):
        parse_rules([{"name": "p", "metric": "m", "aggregation": "quantile", "quantile": 0.5,
                      "maxRelativeBucketWidth": 0}])  # fmt: skip


def test_one_bucket_with_a_positive_lower_bound_is_refused() -> None:
    """Issue 25: bounds [0.1, 10], every request 0.8 s. Interpolation gives p95 = 9.505 s,
    a bucket 1.04 times the estimate but 99 times its lower bound: refused."""
    h = _h((0.1, 10.0), (0, 1000, 0))
    est = sli.histogram_quantile(0.95, h)
    assert est == pytest.approx(9.505)
    assert sli.quantile_refusal(0.95, h, est, 2.0) == ("wide_bucket", 0.1, 10.0)
    # the same tail in a bucket the truth cannot be far below is still served
    assert sli.quantile_refusal(0.95, _h((0.5, 1.0), (0, 1000, 0)), 0.975, 2.0) is None


TTFT = names.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN.name
TTFT_P95 = P95.replace(names.SLI_LATENCY_P95, names.SLI_TTFT_P95)


def test_one_bucket_ttft_over_otlp_is_refused(pki: Pki, adapter: AdapterThread) -> None:
    """The real SDK with a [0.1, 10] s View on TTFT, its real OTLP exporter, the adapter's
    receiver and the external metrics API: the answer is a refusal, not p95 = 9.505 s."""
    exp = RecordingExporter(otlp_exporter(adapter.adapter.otlp_port))
    reader = PeriodicExportingMetricReader(exp, export_interval_millis=3_600_000)
    res = Resource.create({names.ATTR_SERVICE_NAME: "onebucket", names.ATTR_K8S_NAMESPACE: NS})
    view = View(instrument_name=TTFT, aggregation=ExplicitBucketHistogramAggregation([0.1, 10]))
    mp = MeterProvider(resource=res, metric_readers=[reader], views=[view])
    hist = mp.get_meter("t").create_histogram(TTFT, unit="s")
    for _ in range(200):
        hist.record(0.8)
    reader.force_flush()
    mp.shutdown()
    assert exp.results and all(r.name == "SUCCESS" for r in exp.results)
    with api_client(pki, adapter) as c:
        r = c.get(TTFT_P95, params={"labelSelector": "service=onebucket"}, headers=hpa_headers())
        assert r.status_code == 422, r.text
        msg = r.json()["message"]
        assert "(0.1, 10]" in msg and "99 times as wide as its lower bound" in msg
        assert adapter.adapter.provider.refused_reads == {(names.SLI_TTFT_P95, "wide_bucket"): 1}
