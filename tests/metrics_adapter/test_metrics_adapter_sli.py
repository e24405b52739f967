"""Pure SLI math: table cases, and a cross-check against the real Prometheus (promtool)."""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from metrics_adapter import sli
from metrics_adapter.sli import ExplicitHistogram as H
from metrics_adapter.sli import ExponentialHistogram as E

INF = math.inf
CUM = [(0.1, 10.0), (0.2, 30.0), (0.5, 60.0), (1.0, 90.0), (INF, 100.0)]


@pytest.mark.parametrize(
    ("q", "buckets", "want"),
    [
        pytest.param(0.5, CUM, 0.2 + 0.3 * (50 - 30) / 30, id="interpolates inside the bucket"),
        pytest.param(0.05, CUM, 0.1 * 5 / 10, id="first bucket starts at 0"),
        pytest.param(0.95, CUM, 1.0, id="in the +Inf bucket: largest finite bound"),
        pytest.param(0.9, CUM, 1.0, id="rank on a bucket bound"),
        pytest.param(-0.1, CUM, -INF, id="q < 0 gives -Inf"),
        pytest.param(1.5, CUM, INF, id="q > 1 gives +Inf"),
        pytest.param(math.nan, CUM, math.nan, id="q NaN gives NaN"),
        pytest.param(0.5, [(0.1, 0.0), (INF, 0.0)], math.nan, id="no observations: NaN"),
        pytest.param(0.5, [(0.1, 5.0), (0.2, 10.0)], math.nan, id="no +Inf bucket: NaN"),
        pytest.param(0.5, [(INF, 10.0)], math.nan, id="only the +Inf bucket: NaN"),
        pytest.param(
            0.3, [(-1.0, 5.0), (0.0, 8.0), (INF, 10.0)], -1.0, id="first bucket bound <= 0"
        ),
        pytest.param(
            0.6,
            [(-1.0, 5.0), (0.0, 8.0), (INF, 10.0)],
            -1.0 + 1.0 * (6 - 5) / 3,
            id="negative bounds",
        ),
        pytest.param(
            0.5,
            [(0.2, 30.0), (0.1, 10.0), (INF, 100.0), (0.5, 60.0), (1.0, 90.0)],
            0.2 + 0.3 * 20 / 30,
            id="unsorted buckets",
        ),  # fmt: skip
        pytest.param(
            0.5,
            [(0.1, 10.0), (0.2, 8.0), (INF, 20.0)],
            0.1 + 0.1 * (10 - 10) / 1,
            id="non-monotonic fixed",
        ),
        pytest.param(0.5, [(0.1, 5.0), (0.1, 5.0), (INF, 20.0)], 0.1, id="duplicate bounds merged"),
    ],
)
def test_bucket_quantile(q: float, buckets: list, want: float) -> None:
    got = sli.bucket_quantile(q, buckets)
    if math.isnan(want):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(want)


def test_otel_histogram_quantile_and_bounds() -> None:
    h = H((0.1, 0.2, 0.5, 1.0), (10, 20, 30, 30, 10))
    assert sli.histogram_quantile(0.5, h) == sli.bucket_quantile(0.5, CUM)
    assert sli.quantile_error_bound(0.5, h) == pytest.approx(0.3)
    assert sli.quantile_error_bound(0.99, h) == INF
    with pytest.raises(ValueError, match="bounds"):
        sli.histogram_quantile(0.5, H((0.1,), (1, 2, 3)))


@pytest.mark.parametrize(
    ("threshold", "want"),
    [
        pytest.param(0.2, 30.0, id="on a bound: exact"),
        pytest.param(0.35, 30 + 30 * 0.15 / 0.3, id="inside a bucket: interpolated"),
        pytest.param(0.05, 5.0, id="first bucket from 0"),
        pytest.param(5.0, 90.0, id="beyond the largest bound: finite buckets only"),
        pytest.param(0.0, 0.0, id="zero threshold"),
    ],
)
def test_count_below(threshold: float, want: float) -> None:
    h = H((0.1, 0.2, 0.5, 1.0), (10, 20, 30, 30, 10))
    assert sli.count_below(threshold, h) == pytest.approx(want)


def test_count_below_inverts_the_quantile() -> None:
    h = H((0.1, 0.2, 0.5, 1.0), (10, 20, 30, 30, 10))
    for q in (0.05, 0.3, 0.5, 0.77, 0.9):
        assert sli.count_below(sli.histogram_quantile(q, h), h) == pytest.approx(q * 100)


def test_rate_and_increase() -> None:
    s = [(0.0, 0.0), (10.0, 10.0), (20.0, 5.0), (30.0, 15.0)]
    assert sli.increase(s, -5, 30, "none") == 25.0  # 10 + (reset: 5) + 10
    assert sli.rate(s, -5, 30, "none") == pytest.approx(25 / 30)
    # extrapolation: start gap 5 s < 1.1 * 10 s but the counter was at 0 at t=0 -> no extension
    assert sli.rate(s, -5, 30) == pytest.approx(25 / 35)
    assert sli.rate(s[:1], -5, 30) is None
    assert sli.ratio(1, 0) is None and sli.ratio(None, 2) is None and sli.ratio(1, 4) == 0.25


def test_histogram_increase_and_good_rate() -> None:
    b = (0.1, 0.2)
    pts = [
        (0.0, H(b, (0, 0, 0))),
        (10.0, H(b, (5, 5, 0))),
        (20.0, H(b, (2, 0, 1))),
        (30.0, H(b, (4, 2, 1))),
    ]
    delta, secs = sli.histogram_increase(pts, -1, 30)
    assert delta.counts == (5 + 2 + 2, 5 + 0 + 2, 0 + 1 + 0) and secs == 30
    assert sli.good_rate(delta, secs, 0.1) == pytest.approx(9 / 30)
    assert sli.good_rate(delta, secs, 0.15) == pytest.approx((9 + 3.5) / 30)
    assert sli.histogram_increase(pts[:1], -1, 30) is None


def test_exponential_quantile_and_scales() -> None:
    e = E(scale=0, positive_offset=0, positive_counts=(10, 10, 10, 10))
    assert sli.exponential_quantile(0.5, e) == pytest.approx(4.0)
    # a quarter of the way into (2, 4]: exponential interpolation 2 * 2 ** 0.5... of rank
    assert sli.exponential_quantile(0.3, e) == pytest.approx(2 * 2 ** ((12 - 10) / 10))
    z = E(scale=0, zero_count=10, zero_threshold=0.5, positive_counts=(10,))
    assert sli.exponential_quantile(0.25, z) == pytest.approx(0.25)
    neg = E(scale=0, negative_offset=0, negative_counts=(10,), positive_counts=(10,))
    assert sli.exponential_quantile(0.0, neg) == pytest.approx(-2.0)
    d = sli.exponential_downscale(E(scale=1, positive_offset=1, positive_counts=(1, 2, 3)), 0)
    assert (d.positive_offset, d.positive_counts) == (0, (1.0, 5.0))
    older = E(scale=1, positive_offset=0, positive_counts=(1, 1))
    newer = E(scale=0, positive_offset=0, positive_counts=(3, 1))
    diff = sli.exponential_delta(older, newer)
    assert diff.scale == 0 and diff.positive_counts == (1.0, 1.0)
    assert sli.exponential_delta(newer, older) == older, "a drop is a reset"
    assert math.isnan(sli.exponential_quantile(0.5, E(scale=0)))


@pytest.mark.prometheus
@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_matches_prometheus_itself(tmp_path: Path) -> None:
    """promtool evaluates histogram_quantile and rate on the same data; our values must agree."""
    buckets = {"0.1": "0+1x10", "0.2": "0+3x10", "0.5": "0+6x10", "1": "0+9x10", "+Inf": "0+10x10"}
    series = [{"series": f'h_bucket{{le="{le}"}}', "values": v} for le, v in buckets.items()]
    series.append({"series": "c", "values": "0 10 20 5 15 25 35 4 14 24 34"})
    cum = [(float(le), 10.0 * float(v.split("+")[1].split("x")[0])) for le, v in buckets.items()]
    c_samples = [
        (60.0 * i, float(v)) for i, v in enumerate("0 10 20 5 15 25 35 4 14 24 34".split())
    ]
    # promtool 2.x: a range [t-r, t] is closed; our (start, end] is left-open, so keep
    # sample times off the left edge (window 270 s ending at 600 s starts at 330 s)
    exprs = {
        "histogram_quantile(0.5, h_bucket)": sli.bucket_quantile(0.5, cum),
        "histogram_quantile(0.93, h_bucket)": sli.bucket_quantile(0.93, cum),
        "histogram_quantile(0.99, h_bucket)": sli.bucket_quantile(0.99, cum),
        "histogram_quantile(0.05, h_bucket)": sli.bucket_quantile(0.05, cum),
        "rate(c[270s])": sli.rate(c_samples, 330, 600),
        "increase(c[270s])": sli.increase(c_samples, 330, 600),
        "rate(c[10m])": sli.increase(c_samples, -1e-9, 600) / 600,  # closed range: t=0 included
    }
    tests = []
    for expr, val in exprs.items():
        tests.append(
            {"expr": expr, "eval_time": "10m", "exp_samples": [{"labels": "{}", "value": val}]}
        )
    doc = {"rule_files": [], "evaluation_interval": "1m",
           "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}]}  # fmt: skip
    f = tmp_path / "t.yaml"
    f.write_text(yaml.safe_dump(doc))
    out = subprocess.run(
        ["promtool", "test", "rules", str(f)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr
