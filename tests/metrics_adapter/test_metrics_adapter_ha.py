"""High availability: the collector's fan-out exporter pushes to every adapter replica
(every address of a headless Service), so two replicas serve the same values."""

from __future__ import annotations

import logging
import random

import pytest

from bpf.fanout import FanoutMetricExporter, parse_endpoints, resolve_endpoints
from kvspread import names
from metrics_adapter.server import AdapterThread
from tests.metrics_adapter.adapter_otel_helpers import provider
from tests.metrics_adapter.adapter_testing import Pki, api_client, base_config, hpa_headers
from tests.ports import port_free_on

NS = "llm"
SERVICE = "kvspread-adapter-otlp.kvspread.svc"


def test_parse_and_resolve_endpoints() -> None:
    eps = parse_endpoints(
        f"dns:///{SERVICE}:4318, http://10.0.0.9:4318, https://a.example/otlp/v1/metrics"
    )
    urls = resolve_endpoints(
        eps, lambda host, port: ["10.1.0.1", "fd00::2"] if host == SERVICE else []
    )
    assert urls == [
        "http://10.1.0.1:4318/v1/metrics",
        "http://[fd00::2]:4318/v1/metrics",
        "http://10.0.0.9:4318/v1/metrics",
        "https://a.example/otlp/v1/metrics",
    ]
    with pytest.raises(ValueError, match="dns:///NAME:PORT"):
        parse_endpoints("dns:///noport")
    with pytest.raises(ValueError, match="want http"):
        parse_endpoints("ftp://x")


def test_two_replicas_serve_the_same_values(pki: Pki, caplog: pytest.LogCaptureFixture) -> None:
    hosts = ["127.0.0.1", "127.0.0.2"]
    port = port_free_on(hosts + ["127.0.0.3"])
    answers = {"addrs": hosts + ["127.0.0.3"]}  # .3: a replica that is not up yet
    cfgs = [base_config(pki, otlp_bind_address=h, otlp_port=port) for h in hosts]
    with AdapterThread(cfgs[0]) as a, AdapterThread(cfgs[1]) as b:
        exporter = FanoutMetricExporter(
            f"dns:///{SERVICE}:{port}", timeout=2, resolver=lambda h, p: list(answers["addrs"])
        )
        res = {names.ATTR_SERVICE_NAME: "vision", names.ATTR_K8S_NAMESPACE: NS}
        mp, reader = provider(exporter, res)
        hist = mp.get_meter("ha").create_histogram(
            names.HTTP_SERVER_REQUEST_DURATION.name, unit="s"
        )
        rng = random.Random(3)
        with caplog.at_level(logging.WARNING, logger="bpf.fanout"):
            for _ in range(3):
                for _ in range(300):
                    hist.record(rng.expovariate(8.0), {names.ATTR_MODALITY: "image"})
                assert reader.force_flush()
        failing = [r for r in caplog.records if r.getMessage() == "otlp endpoint failing"]
        assert len(failing) == 1, "a failing endpoint is logged once"
        assert exporter.failures == {f"http://127.0.0.3:{port}/v1/metrics": 3}
        answers["addrs"] = hosts  # the dead address left the Service
        assert reader.force_flush()
        assert exporter.failures[f"http://127.0.0.3:{port}/v1/metrics"] == 3
        mp.shutdown()

        served = []
        for rep in (a, b):
            with api_client(pki, rep) as c:
                vals = {}
                for metric in (
                    names.SLI_LATENCY_P95,
                    names.SLI_REQUESTS_PER_SECOND,
                    names.SLI_GOOD_REQUESTS_PER_SECOND,
                ):
                    r = c.get(
                        f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NS}/{metric}",
                        params={"labelSelector": "service=vision"},
                        headers=hpa_headers(),
                    )
                    assert r.status_code == 200
                    (item,) = r.json()["items"]
                    vals[metric] = (item["value"], item["timestamp"])
                served.append(vals)
        assert served[0] == served[1]
        assert a.adapter.store.points == b.adapter.store.points >= 4
