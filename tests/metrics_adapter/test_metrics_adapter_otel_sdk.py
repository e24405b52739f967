"""The real OpenTelemetry SDK pushes to the adapter; served SLIs match the known samples."""

from __future__ import annotations

import math
import random

import httpx

from kvspread import names
from metrics_adapter import sli
from metrics_adapter.server import AdapterThread
from tests.metrics_adapter.adapter_otel_helpers import (
    DURATION_BOUNDS,
    RecordingExporter,
    otlp_exporter,
    provider,
)
from tests.metrics_adapter.adapter_testing import Pki, api_client, base_config, hpa_headers

NS = "llm"
RESOURCE = {
    names.ATTR_SERVICE_NAME: "vision",
    names.ATTR_K8S_NAMESPACE: NS,
    names.ATTR_K8S_POD: "vision-0",
}


def _read(client: httpx.Client, metric: str, selector: str = "service=vision") -> list[dict]:
    r = client.get(
        f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NS}/{metric}",
        params={"labelSelector": selector},
        headers=hpa_headers(),
    )
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["kind"] == "ExternalMetricValueList"
    return doc["items"]


def _quantity(text: str) -> float:
    from kvspread.quantity import parse_quantity

    return float(parse_quantity(text))


def _true_quantile(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def test_sdk_histogram_p95_within_bucket_bound(pki: Pki, adapter: AdapterThread) -> None:
    rng = random.Random(7)
    samples = [rng.lognormvariate(math.log(0.12), 0.6) for _ in range(2000)]
    exp = RecordingExporter(otlp_exporter(adapter.adapter.otlp_port))
    mp, reader = provider(exp, RESOURCE)
    hist = mp.get_meter("test").create_histogram(names.HTTP_SERVER_REQUEST_DURATION.name, unit="s")
    for i, v in enumerate(samples):
        hist.record(v, {names.ATTR_HTTP_ROUTE: "/v1/chat", names.ATTR_HTTP_STATUS: 500 if i % 50 == 0 else 200,
                        names.ATTR_MODALITY: "image"})  # fmt: skip
    reader.force_flush()
    mp.shutdown()
    assert exp.results and all(r.name == "SUCCESS" for r in exp.results)

    with api_client(pki, adapter) as c:
        for metric, q in (
            (names.SLI_LATENCY_P95, 0.95),
            (names.SLI_LATENCY_P50, 0.5),
            (names.SLI_LATENCY_P99, 0.99),
        ):
            items = _read(c, metric)
            assert len(items) == 1
            served = _quantity(items[0]["value"])
            true = _true_quantile(samples, q)
            counts = [0] * (len(DURATION_BOUNDS) + 1)
            for v in samples:
                counts[
                    next((i for i, b in enumerate(DURATION_BOUNDS) if v <= b), len(DURATION_BOUNDS))
                ] += 1
            bound = sli.quantile_error_bound(
                q, sli.ExplicitHistogram(DURATION_BOUNDS, tuple(counts))
            )
            assert abs(served - true) <= bound + 1e-9, (metric, served, true, bound)
            assert items[0]["window"] == 60
            assert items[0]["metricLabels"]["service"] == "vision"
            assert items[0]["metricLabels"]["namespace"] == NS
            assert items[0]["timestamp"].endswith("Z")
        # rates: one series per attribute set, each counted from its own start time
        sent = exp.sent[-1].resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
        secs = [(p.time_unix_nano - p.start_time_unix_nano) / 1e9 for p in sent]
        rps = _quantity(_read(c, names.SLI_REQUESTS_PER_SECOND)[0]["value"])
        assert math.isclose(
            rps, sum(p.count / s for p, s in zip(sent, secs, strict=True)), rel_tol=1e-4
        )
        assert sum(p.count for p in sent) == len(samples)
        good = _quantity(_read(c, names.SLI_GOOD_REQUESTS_PER_SECOND)[0]["value"])
        want_good = sum(
            sli.count_below(0.2, sli.ExplicitHistogram(DURATION_BOUNDS, tuple(p.bucket_counts))) / s
            for p, s in zip(sent, secs, strict=True)
        )
        assert math.isclose(good, want_good, rel_tol=1e-4)
        ratio = _quantity(_read(c, names.SLI_ERROR_RATIO)[0]["value"])
        errors = sum(
            p.count / s
            for p, s in zip(sent, secs, strict=True)
            if dict(p.attributes)[names.ATTR_HTTP_STATUS] == 500
        )
        assert math.isclose(ratio, errors / rps, rel_tol=1e-4)
        assert 0.01 < ratio < 0.04  # 40 of 2000 requests failed


def test_sdk_counter_with_reset_gives_the_right_rate(pki: Pki) -> None:
    rules = [
        {"name": "tokens_per_second", "metric": "llm.tokens", "aggregation": "rate"},
        {
            "name": "queue",
            "metric": names.ENGINE_REQUESTS_WAITING.name,
            "aggregation": "last",
            "combine": "sum",
        },
    ]
    with AdapterThread(base_config(pki, rules=rules)) as a:
        exp1 = RecordingExporter(otlp_exporter(a.adapter.otlp_port))
        mp1, r1 = provider(exp1, RESOURCE)
        counter = mp1.get_meter("t").create_counter("llm.tokens")
        counter.add(100)
        r1.force_flush()
        counter.add(150)
        r1.force_flush()
        mp1.shutdown()  # the process "restarts": its counter starts again from zero
        exp2 = RecordingExporter(otlp_exporter(a.adapter.otlp_port))
        mp2, r2 = provider(exp2, RESOURCE)
        mp2.get_meter("t").create_counter("llm.tokens").add(30)
        gauge = mp2.get_meter("t").create_gauge(names.ENGINE_REQUESTS_WAITING.name)
        gauge.set(4, {names.ATTR_K8S_POD: "a"})
        gauge.set(3, {names.ATTR_K8S_POD: "b"})
        r2.force_flush()
        mp2.shutdown()

        def pts(e: RecordingExporter) -> list:
            out = []
            for md in e.sent:
                for m in md.resource_metrics[0].scope_metrics[0].metrics:
                    if m.name == "llm.tokens":
                        out.extend(m.data.data_points)
            return out

        p1, p2 = pts(exp1), pts(exp2)
        assert (
            [p.value for p in p1][:2] == [100, 250]
            and set([p.value for p in p1][2:]) <= {250}
            and {p.value for p in p2} == {30}
        )
        first_t = p1[0].start_time_unix_nano / 1e9  # the zero the adapter infers at start
        last_t = p2[-1].time_unix_nano / 1e9
        with api_client(pki, a) as c:
            r = c.get(f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NS}/tokens_per_second",
                      headers=hpa_headers())  # fmt: skip
            assert r.status_code == 200, r.text
            served = _quantity(r.json()["items"][0]["value"])
            assert math.isclose(served, 280 / (last_t - first_t), rel_tol=1e-4), served
            q = c.get(
                f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NS}/queue",
                headers=hpa_headers(),
            )
            assert q.json()["items"][0]["value"] == "7"
