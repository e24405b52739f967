"""The metrics adapter behind a real kube-apiserver v1.26 aggregator: the shipped APIService
(its Service made an ExternalName for localhost, since no kube-proxy runs here), the adapter
reading the request-header CA from the real kube-system/extension-apiserver-authentication
and authorising by SubjectAccessReview under its shipped RBAC and ServiceAccount token. A
queue-depth gauge pushed over OTLP comes back through
/apis/external.metrics.k8s.io/v1beta1 for the HPA controller's identity; a user the
shipped ClusterRole does not name gets 403."""

from __future__ import annotations

import time

import httpx
import yaml

from kvspread import names
from metrics_adapter.config import AdapterConfig
from metrics_adapter.server import AdapterThread
from tests.cluster.captures import record
from tests.cluster.controlplane import ROOT, ControlPlane
from tests.cluster.install import SERVICE_ACCOUNTS, install
from tests.metrics_adapter.adapter_otlp_payloads import gauge, request

HPA = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
METRIC = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/{names.SLI_QUEUE_DEPTH}"
WAIT_S = 60.0


def test_external_metrics_through_the_real_aggregator(cp: ControlPlane) -> None:
    install(cp)
    ns, sa = SERVICE_ACCOUNTS["adapter"]
    cfg = AdapterConfig.from_mapping(
        {
            "secure_port": 0,
            "bind_address": "127.0.0.1",
            "otlp_port": 0,
            "otlp_bind_address": "127.0.0.1",
            "kubeconfig": str(cp.sa_kubeconfig(ns, sa)),
            # requestheader CA, allowed names and authorization: the defaults (the
            # ConfigMap, SubjectAccessReview)
        }
    )
    with AdapterThread(cfg) as a:
        body = request(
            {names.ATTR_K8S_NAMESPACE: "llm", names.ATTR_SERVICE_NAME: "text"},
            [gauge(names.ENGINE_REQUESTS_WAITING.name, [(time.time(), 7, {})])],
        ).SerializeToString()
        r = httpx.post(
            f"http://127.0.0.1:{a.adapter.otlp_port}/v1/metrics",
            content=body,
            headers={"content-type": "application/x-protobuf"},
        )
        assert r.status_code == 200, r.text
        cp.create(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "kvspread-adapter", "namespace": "kvspread"},
                "spec": {"type": "ExternalName", "externalName": "localhost"},
            }
        )
        svc = yaml.safe_load((ROOT / "manifests/metrics-adapter/apiservice.yaml").read_text())
        svc["spec"]["service"]["port"] = a.adapter.api_port
        cp.create(svc)
        deadline = time.monotonic() + WAIT_S
        while True:
            got = cp.request("GET", METRIC, as_user=HPA)
            if got.status_code == 200:
                break
            assert time.monotonic() < deadline, (got.status_code, got.text[:500])
            time.sleep(0.5)
        value = got.json()
        stranger = cp.request("GET", METRIC, as_user="system:serviceaccount:default:someone")
        status = cp.ok(
            "GET", "/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.external.metrics.k8s.io"
        )
    assert value["kind"] == "ExternalMetricValueList"
    assert [i["value"] for i in value["items"]] == ["7"]
    assert stranger.status_code == 403
    conds = {c["type"]: c["status"] for c in status["status"]["conditions"]}
    assert conds["Available"] == "True"
    record(
        "external-metrics-through-aggregator",
        {
            "request": f"GET {METRIC} as {HPA}",
            "answer": {"kind": value["kind"], "apiVersion": value["apiVersion"],
                       "items": [{"metricName": i["metricName"], "value": i["value"]} for i in value["items"]]},
            "other user status": stranger.status_code,
            "APIService Available": conds["Available"],
        },
    )  # fmt: skip
