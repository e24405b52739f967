"""The real HPA controller (kube-controller-manager v1.26) on kvspread's SLO pressure, read
through the real aggregator: what the serving simulation's HPA (simulator/serving/hpa.py)
claims about a new HPA, checked against the controller itself. A Deployment at 4 replicas
whose pressure reads 0 is not scaled down at the HPA's first sync: the controller records
the count it found as a recommendation (recordInitialRecommendation), which holds the
replicas for one scale-down stabilisation window; then it scales to minReplicas.

No kubelet runs here: the 4 pods are bound to a node name by hand and their status set to
Running and Ready, which is what the controller counts (getReadyPodsCount); no Deployment
controller runs either, so only the HPA changes spec.replicas."""

from __future__ import annotations

import time
from typing import Any

import httpx

from kvspread import names
from tests.cluster.aggregated import behind_the_aggregator
from tests.cluster.captures import record
from tests.cluster.controlplane import ControlPlane
from tests.metrics_adapter.adapter_otlp_payloads import gauge, request

WINDOW_S = 20
"""The HPA's scale-down stabilisation window here (Kubernetes' default is 300 s)."""
SYNC_S = 2
"""--horizontal-pod-autoscaler-sync-period."""
NS = "llm"
DEADLINE_S = 180.0


def _objects() -> list[dict[str, Any]]:
    labels = {"app": "chat"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "chat", "namespace": NS},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "engine", "image": "engine:1"}]},
            },
        },
    }
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "chat", "namespace": NS},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat"},
            "minReplicas": 1,
            "maxReplicas": 8,
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {
                            "name": names.SLI_SLO_PRESSURE,
                            "selector": {"matchLabels": {"service": "text"}},
                        },
                        "target": {"type": "Value", "value": "1"},
                    },
                }
            ],
            "behavior": {
                "scaleDown": {
                    "stabilizationWindowSeconds": WINDOW_S,
                    "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
                }
            },
        },
    }
    return [deployment, hpa]


def _ready_pod(cp: ControlPlane, i: int) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"chat-{i}", "namespace": NS, "labels": {"app": "chat"}},
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
        f"/api/v1/namespaces/{NS}/pods/chat-{i}/status",
        status,
        content_type="application/merge-patch+json",
    )


def test_a_new_hpa_holds_its_replicas_for_one_scale_down_window(cp: ControlPlane) -> None:
    cp.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    cp.service_account(NS, "default")  # no service-account controller runs here
    with behind_the_aggregator(cp) as (adapter, _):
        push_url = f"http://127.0.0.1:{adapter.adapter.otlp_port}/v1/metrics"

        def push_idle() -> None:  # one engine, nothing waiting: pressure 0
            body = request(
                {names.ATTR_K8S_NAMESPACE: NS, names.ATTR_SERVICE_NAME: "text"},
                [gauge(names.ENGINE_REQUESTS_WAITING.name, [(time.time(), 0, {})])],
            ).SerializeToString()
            r = httpx.post(
                push_url, content=body, headers={"content-type": "application/x-protobuf"}
            )
            assert r.status_code == 200, r.text

        push_idle()
        deployment, hpa = _objects()
        cp.create(deployment)
        for i in range(4):
            _ready_pod(cp, i)
        scale = f"/apis/apps/v1/namespaces/{NS}/deployments/chat/scale"
        hpa_path = f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers/chat"
        with cp.controller_manager(
            "horizontalpodautoscaling",
            cp.kubeconfig_admin(),
            f"--horizontal-pod-autoscaler-sync-period={SYNC_S}s",
        ):
            cp.create(hpa)
            created = time.monotonic()
            first_status: float | None = None
            reasons: set[str] = set()
            seen: list[tuple[float, int]] = []
            while True:
                now = time.monotonic()
                assert now - created < DEADLINE_S, (seen, reasons, cp.ok("GET", hpa_path))
                replicas = cp.ok("GET", scale)["spec"]["replicas"]
                if not seen or seen[-1][1] != replicas:
                    seen.append((round(now - created, 1), replicas))
                st = cp.ok("GET", hpa_path).get("status", {})
                for c in st.get("conditions") or []:
                    if c["type"] == "AbleToScale":
                        reasons.add(c["reason"])
                if first_status is None and st.get("conditions"):
                    first_status = now - created
                if replicas != 4:
                    break
                push_idle()
                time.sleep(0.5)
            down_after = now - created
    assert first_status is not None
    # the held count: a controller without the initial recommendation would have scaled
    # down at its first sync, within a sync period of its first status
    assert down_after - first_status >= WINDOW_S - SYNC_S, (first_status, down_after, seen)
    assert "ScaleDownStabilized" in reasons, reasons
    assert seen[-1][1] == 1, seen
    record(
        "hpa-first-sync-hold",
        {
            "scale-down window s": WINDOW_S,
            "sync period s": SYNC_S,
            "replicas at creation": 4,
            "pressure": 0,
            "replicas after": seen[-1][1],
            "first status after creation s": round(first_status, 1),
            "scaled down after creation s": round(down_after, 1),
            "AbleToScale reasons seen": sorted(reasons),
        },
    )
