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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from kvspread import names
from tests.cluster import aggregated
from tests.cluster.aggregated import NS, behind_the_aggregator, push_queue, ready_pod
from tests.cluster.captures import record
from tests.cluster.controlplane import ROOT, ControlPlane

WINDOW_S = 20
"""The HPA's scale-down stabilisation window here (Kubernetes' default is 300 s)."""
SYNC_S = 2
"""--horizontal-pod-autoscaler-sync-period."""
DEADLINE_S = 180.0


def _objects() -> list[dict[str, Any]]:
    deployment = aggregated.deployment("chat", 4)
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


@dataclass
class _Run:
    """What one HPA did: the scale's replica counts as they changed (seconds after the HPA
    was created), when it first wrote a status condition and the AbleToScale reasons."""

    seen: list[tuple[float, int]] = field(default_factory=list)
    first_status: float | None = None
    reasons: set[str] = field(default_factory=set)


def _run_hpa(
    cp: ControlPlane, hpa: dict[str, Any], port: int, service: str, waiting: int,
    done: Callable[[_Run], bool],
) -> _Run:  # fmt: skip
    """Create `hpa` under the real HPA controller and watch its target's scale (re-pushing
    `waiting` queued requests for `service`, so the pressure stays fresh) until `done`."""
    target = hpa["spec"]["scaleTargetRef"]["name"]
    scale = f"/apis/apps/v1/namespaces/{NS}/deployments/{target}/scale"
    hpa_path = (
        f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers/{hpa['metadata']['name']}"
    )
    run = _Run()
    with cp.controller_manager(
        "horizontalpodautoscaling",
        cp.kubeconfig_admin(),
        f"--horizontal-pod-autoscaler-sync-period={SYNC_S}s",
    ):
        cp.create(hpa)
        created = time.monotonic()
        while not done(run):
            now = time.monotonic() - created
            assert now < DEADLINE_S, (run, cp.ok("GET", hpa_path))
            replicas = cp.ok("GET", scale)["spec"]["replicas"]
            if not run.seen or run.seen[-1][1] != replicas:
                run.seen.append((round(now, 1), replicas))
            conditions = cp.ok("GET", hpa_path).get("status", {}).get("conditions") or []
            run.reasons |= {c["reason"] for c in conditions if c["type"] == "AbleToScale"}
            if run.first_status is None and conditions:
                run.first_status = now
            push_queue(port, service, waiting)
            time.sleep(0.5)
    return run


def test_a_new_hpa_holds_its_replicas_for_one_scale_down_window(cp: ControlPlane) -> None:
    cp.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    cp.service_account(NS, "default")  # no service-account controller runs here
    with behind_the_aggregator(cp) as (adapter, _):
        port = adapter.adapter.otlp_port
        push_queue(port, "text", 0)  # one engine, nothing waiting: pressure 0
        deployment, hpa = _objects()
        cp.create(deployment)
        for i in range(4):
            ready_pod(cp, i)
        run = _run_hpa(cp, hpa, port, "text", 0, lambda r: bool(r.seen) and r.seen[-1][1] != 4)
    assert run.first_status is not None
    down_after = run.seen[-1][0]
    # the held count: a controller without the initial recommendation would have scaled
    # down at its first sync, within a sync period of its first status
    assert down_after - run.first_status >= WINDOW_S - SYNC_S, run
    assert "ScaleDownStabilized" in run.reasons, run
    assert run.seen[-1][1] == 1, run
    record(
        "hpa-first-sync-hold",
        {
            "scale-down window s": WINDOW_S,
            "sync period s": SYNC_S,
            "replicas at creation": 4,
            "pressure": 0,
            "replicas after": run.seen[-1][1],
            "first status after creation s": round(run.first_status, 1),
            "scaled down after creation s": down_after,
            "AbleToScale reasons seen": sorted(run.reasons),
        },
    )


def test_the_shipped_example_hpa_scales_up_two_pods_a_minute(cp: ControlPlane) -> None:
    """manifests/metrics-adapter/examples/hpa-slo-pressure.yaml as shipped, on the real
    controller: one ready replica with 40 requests waiting (pressure 40 / 4 = 10, which asks
    for 10 replicas) goes to 3 at once and to 5 no sooner than a minute later (2 pods or
    50 % a minute from the count the period started with), as the simulator's `slo` HPA
    does (SLO_BEHAVIOR, tested equal to this manifest)."""
    ns_doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    cp.create(ns_doc)
    cp.service_account(NS, "default")
    hpa = yaml.safe_load(
        (ROOT / "manifests/metrics-adapter/examples/hpa-slo-pressure.yaml").read_text()
    )
    target = hpa["spec"]["scaleTargetRef"]["name"]
    service = hpa["spec"]["metrics"][0]["external"]["metric"]["selector"]["matchLabels"]["service"]
    deployment = aggregated.deployment(target, 1)
    with behind_the_aggregator(cp) as (adapter, _):
        port = adapter.adapter.otlp_port
        push_queue(port, service, 40)
        cp.create(deployment)
        ready_pod(cp, 0, target)  # the added replicas never become ready: no kubelet
        run = _run_hpa(cp, hpa, port, service, 40, lambda r: bool(r.seen) and r.seen[-1][1] >= 5)
    seen = run.seen
    counts = [r for _, r in seen]
    assert counts == [1, 3, 5], seen
    assert seen[2][0] - seen[1][0] >= 60 - SYNC_S, seen
    record(
        "hpa-example-scale-up",
        {
            "manifest": "manifests/metrics-adapter/examples/hpa-slo-pressure.yaml",
            "sync period s": SYNC_S,
            "ready replicas": 1,
            "pressure": 10,
            "replica counts": counts,
            "seconds between the two scale-ups": round(seen[2][0] - seen[1][0], 1),
        },
    )
