"""The metrics adapter registered behind a real kube-apiserver v1.26 aggregator (the
shipped APIService, its Service an ExternalName for localhost), shared by the cluster tests
that read external metrics through it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import yaml

from kvspread import names
from metrics_adapter.config import AdapterConfig
from metrics_adapter.server import AdapterThread
from tests.cluster.controlplane import ROOT, ControlPlane
from tests.cluster.install import SERVICE_ACCOUNTS, install
from tests.metrics_adapter.adapter_otlp_payloads import gauge, post, request

HPA = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
METRIC = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/{names.SLI_QUEUE_DEPTH}"
WAIT_S = 60.0
NS = "llm"


def push_queue(port: int, service: str, waiting: int, namespace: str = "llm") -> None:
    """One engine of `service` with `waiting` requests queued, pushed over real OTLP."""
    post(port, request(
        {names.ATTR_K8S_NAMESPACE: namespace, names.ATTR_SERVICE_NAME: service},
        [gauge(names.ENGINE_REQUESTS_WAITING.name, [(time.time(), waiting, {})])],
    ))  # fmt: skip


@contextmanager
def behind_the_aggregator(cp: ControlPlane, **over: Any) -> Iterator[tuple[AdapterThread, Any]]:
    """The adapter (config keys `over` added) registered with the shipped APIService, a
    queue-depth gauge of 7 pushed; yields it and the first 200 answer read as the HPA."""
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
            **over,
        }
    )
    with AdapterThread(cfg) as a:
        push_queue(a.adapter.otlp_port, "text", 7)
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
        try:
            deadline = time.monotonic() + WAIT_S
            while True:
                got = cp.request("GET", METRIC, as_user=HPA)
                if got.status_code == 200:
                    break
                assert time.monotonic() < deadline, (got.status_code, got.text[:500])
                time.sleep(0.5)
            yield a, got.json()
        finally:  # the next test registers its own adapter's port
            cp.request("DELETE", cp.path(svc, named=True))


def ready_pod(cp: ControlPlane, i: int, app: str = "chat") -> None:
    """Pod `app`-`i` in NS, bound to a node by hand and set Running and Ready (no kubelet
    runs here): what the HPA controller counts as a ready replica (getReadyPodsCount)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{app}-{i}", "namespace": NS, "labels": {"app": app}},
        "spec": {"nodeName": "gpu-node-0", "containers": [{"name": "engine", "image": "engine:1"}]},
    }
    cp.create(pod)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {
        "status": {
            "phase": "Running",
            "startTime": now,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
        }
    }
    cp.ok(
        "PATCH",
        f"/api/v1/namespaces/{NS}/pods/{app}-{i}/status",
        status,
        content_type="application/merge-patch+json",
    )


def deployment(name: str, replicas: int) -> dict[str, Any]:
    """A Deployment `name` in NS whose pods are labelled app=`name` (the HPA's scale target;
    no Deployment controller runs here, so only an HPA changes its replicas)."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "engine", "image": "engine:1"}]},
            },
        },
    }
