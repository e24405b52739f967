"""The HPA's inputs come from the metrics adapter's own SLI functions."""

from __future__ import annotations

import pytest

from metrics_adapter import sli
from simulator.serving.slis import LATENCY_BOUNDS_S, ServiceMetrics


def filled() -> ServiceMetrics:
    m = ServiceMetrics()
    m.push(0.0, 0, 0.0)
    for i in range(100):  # 100 requests: 0.1 s .. 10 s
        m.observe(0.1 * (i + 1), ok=True)
    m.observe(1.0, ok=False)
    m.push(10.0, 3, 0.25)
    for _ in range(20):
        m.observe(0.15, ok=True)
    m.push(20.0, 5, 0.5)
    return m


def test_p95_is_the_adapters_histogram_quantile() -> None:
    m = filled()
    d, secs = sli.histogram_increase(list(m.hist), -1.0, 20.0)  # type: ignore[misc]
    assert secs == 20.0
    assert d.count == 120
    expect = sli.histogram_quantile(0.95, d)
    assert m.value("kvspread_request_latency_p95_seconds", 20.0, 60.0, 0.2) == expect
    assert 5.0 < expect <= 10.0


def test_rates_and_ratios() -> None:
    m = filled()
    assert m.value("kvspread_requests_per_second", 20.0, 60.0, 0.2) == pytest.approx(121 / 20)
    assert m.value("kvspread_error_ratio", 20.0, 60.0, 0.2) == pytest.approx(1 / 121)
    # good = at most 0.2 s: the 0.1 and 0.2 s requests of the first batch and all 20 later
    assert m.value("kvspread_good_requests_per_second", 20.0, 60.0, 0.2) == pytest.approx(22 / 20)
    assert m.value("kvspread_queue_depth", 20.0, 60.0, 0.2) == 5
    assert m.value("kvspread_kv_cache_usage_ratio", 20.0, 60.0, 0.2) == 0.5


def test_window_excludes_old_observations() -> None:
    m = filled()
    # window (5, 20]: only the push at 10 and 20 -> the 20 fast requests
    assert m.value("kvspread_request_latency_p95_seconds", 20.0, 15.0, 0.2) == pytest.approx(
        0.1 + 0.95 * 0.1, rel=1e-9
    )


def test_nothing_measured_is_none_not_zero() -> None:
    m = ServiceMetrics()
    assert m.value("kvspread_request_latency_p95_seconds", 10.0, 60.0, 0.2) is None
    assert m.value("kvspread_requests_per_second", 10.0, 60.0, 0.2) is None
    m.push(0.0, 0, None)
    m.push(10.0, 0, None)
    assert m.value("kvspread_request_latency_p95_seconds", 10.0, 60.0, 0.2) is None
    assert m.value("kvspread_kv_cache_usage_ratio", 10.0, 60.0, 0.2) is None


def test_good_threshold_is_a_bucket_bound() -> None:
    assert 0.2 in LATENCY_BOUNDS_S
