"""The GenAI attributes the collector puts on its token histograms (gen_ai.provider.name,
gen_ai.request.model) through the adapter: the default TTFT p95 merges a service's series
across them, and a rule that maps them to selector labels reads each one apart. The real
OTel SDK and exporter, the adapter's OTLP receiver and its external metrics API."""

from __future__ import annotations

import random
from decimal import Decimal

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource

from kvspread import names
from kvspread.quantity import parse_quantity
from metrics_adapter.rules import default_rules
from metrics_adapter.server import AdapterThread
from tests.metrics_adapter.adapter_otel_helpers import RecordingExporter, otlp_exporter
from tests.metrics_adapter.adapter_testing import Pki, api_client, base_config, hpa_headers

NS = "llm"
TTFT = names.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN.name
BY_PROVIDER = "ttft_p95_by_provider_seconds"
RULES = [
    {"name": names.SLI_TTFT_P95, "metric": TTFT, "aggregation": "quantile", "quantile": 0.95},
    {
        "name": BY_PROVIDER,
        "metric": TTFT,
        "aggregation": "quantile",
        "quantile": 0.95,
        "labels": {
            names.ATTR_K8S_NAMESPACE: "namespace",
            names.ATTR_SERVICE_NAME: "service",
            names.ATTR_GEN_AI_PROVIDER: "provider",
            names.ATTR_GEN_AI_REQUEST_MODEL: "request_model",
        },
    },
]


def _push(port: int) -> None:
    """One service's streams: fast ones on the OpenAI-compatible route naming model "a",
    slow ones on Triton's naming "b", with the collector's attributes and advised buckets."""
    exp = RecordingExporter(otlp_exporter(port))
    reader = PeriodicExportingMetricReader(exp, export_interval_millis=3_600_000)
    res = Resource.create({names.ATTR_SERVICE_NAME: "chat", names.ATTR_K8S_NAMESPACE: NS})
    view = View(
        instrument_name=TTFT,
        aggregation=ExplicitBucketHistogramAggregation(list(names.GEN_AI_TTFT_BUCKETS)),
    )
    mp = MeterProvider(resource=res, metric_readers=[reader], views=[view])
    hist = mp.get_meter("t").create_histogram(TTFT, unit="s")
    rng = random.Random(7)
    for _ in range(300):
        hist.record(
            rng.uniform(0.065, 0.075),
            {names.ATTR_GEN_AI_PROVIDER: "openai", names.ATTR_GEN_AI_REQUEST_MODEL: "a"},
        )
        hist.record(
            rng.uniform(0.8, 0.95),
            {names.ATTR_GEN_AI_PROVIDER: "nvidia.triton", names.ATTR_GEN_AI_REQUEST_MODEL: "b"},
        )
    reader.force_flush()
    mp.shutdown()
    assert exp.results and all(r.name == "SUCCESS" for r in exp.results)


def test_provider_and_request_model_are_merged_or_selected(pki: Pki) -> None:
    # the default rules keep the collector's attributes unmapped (rules.DEFAULT_LABELS)
    (default,) = [r for r in default_rules() if r.name == names.SLI_TTFT_P95]
    assert default.label_for(names.ATTR_GEN_AI_PROVIDER) is None
    assert default.label_for(names.ATTR_GEN_AI_REQUEST_MODEL) is None
    base = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NS}/"
    with AdapterThread(base_config(pki, rules=RULES)) as a:
        _push(a.adapter.otlp_port)
        with api_client(pki, a) as c:

            def read(metric: str, selector: str) -> tuple[Decimal, dict[str, str]]:
                r = c.get(base + metric, params={"labelSelector": selector}, headers=hpa_headers())
                assert r.status_code == 200, r.text
                (item,) = r.json()["items"]
                return parse_quantity(item["value"]), item["metricLabels"]

            # one p95 over both providers' streams: the slow half sets it
            merged, labels = read(names.SLI_TTFT_P95, "service=chat")
            assert Decimal("0.75") < merged <= Decimal("1.0")
            assert "provider" not in labels and "request_model" not in labels
            # mapped: each provider's own p95, and the model the requests named
            fast, labels = read(BY_PROVIDER, "service=chat,provider=openai")
            assert Decimal("0.06") < fast <= Decimal("0.08")
            assert labels["provider"] == "openai" and labels["request_model"] == "a"
            slow, _ = read(BY_PROVIDER, "service=chat,provider=nvidia.triton")
            assert Decimal("0.75") < slow <= Decimal("1.0")
            assert read(BY_PROVIDER, "service=chat,request_model=a")[0] == fast
            assert read(BY_PROVIDER, "service=chat,provider notin (openai)")[0] == slow
