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

import pytest
import yaml

from kvspread import names
from kvspread.quantity import parse_quantity
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
    cp: ControlPlane, hpa: dict[str, Any], tick: Callable[[float, _Run], None],
    done: Callable[[_Run], bool],
) -> _Run:  # fmt: skip
    """Create `hpa` under the real HPA controller and watch its target's scale, calling
    `tick` (seconds since the HPA was created, the run so far) every half second to keep
    the pressure fresh, until `done`."""
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
            tick(now, run)
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
        run = _run_hpa(cp, hpa, lambda *_: push_queue(port, "text", 0),
                       lambda r: bool(r.seen) and r.seen[-1][1] != 4)  # fmt: skip
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
        run = _run_hpa(cp, hpa, lambda *_: push_queue(port, service, 40),
                       lambda r: bool(r.seen) and r.seen[-1][1] >= 5)  # fmt: skip
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


class _Engines:
    """`pods` engines of service chat pushing real OTLP each call: the waiting gauge, and on
    the first pod the cumulative TPOT and request-duration histograms (one stream and one
    request per call at `tpot_s`, every `every`-th call a request)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.start = time.time()
        self.tpot_bounds = list(names.GEN_AI_TPOT_BUCKETS)
        self.tpot = [0] * (len(self.tpot_bounds) + 1)
        self.dur = [0, 0]
        self.calls = 0

    def push(self, pods: int, tpot_s: float, every: int = 1) -> None:
        from tests.metrics_adapter.adapter_otlp_payloads import gauge, histogram, post, request

        self.calls += 1
        self.tpot[self.tpot_bounds.index(tpot_s)] += 1
        if self.calls % every == 0:
            self.dur[0] += 1
        now = time.time()
        res = {names.ATTR_K8S_NAMESPACE: NS, names.ATTR_SERVICE_NAME: "chat"}
        for i in range(pods):
            own = [gauge(names.ENGINE_REQUESTS_WAITING.name, [(now, 0.0, {})])]
            if i == 0:
                own += [
                    histogram(names.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN.name,
                              [(self.start, now, list(self.tpot), {})], self.tpot_bounds),
                    histogram(names.HTTP_SERVER_REQUEST_DURATION.name,
                              [(self.start, now, list(self.dur), {})], [1.0]),
                ]  # fmt: skip
            post(self.port, request({**res, names.ATTR_K8S_POD: f"chat-{i}"}, own))


def test_the_scale_down_guard_holds_a_count_that_missed_on_the_real_controller(
    cp: ControlPlane,
) -> None:
    """The adapter's scale-down guard (default rules, 10 s windows) under the real HPA
    controller: a TPOT 3 x its target at 2 engines and 2 requests/s is read once through
    the aggregator (a violation: 2 replicas at 1 request/s each); then 3 engines at the
    TPOT floor (pressure 0.49, which asks for 2). The guard serves 2.5 / 3 and the
    controller keeps 3 replicas for two scale-down windows; once the rate halves (2
    replicas would carry 0.5 each, under 0.8 x 1) it scales to 2."""
    cp.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    cp.service_account(NS, "default")
    path = (f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NS}/{names.SLI_SLO_PRESSURE}"
            "?labelSelector=service%3Dchat")  # fmt: skip
    with behind_the_aggregator(cp, window="10s") as (adapter, _):
        engines = _Engines(adapter.adapter.otlp_port)
        for _ in range(16):  # 8 s: 2 streams/s at 0.15 s per token, 2 requests/s
            engines.push(2, 0.15)
            time.sleep(0.5)
        (first,) = cp.ok("GET", path)["items"]
        assert first["metricLabels"]["term"] == names.SLI_TPOT_P95, first
        for _ in range(24):  # 12 s at the floor: the 10 s window holds no slow stream
            engines.push(3, 0.025)
            time.sleep(0.5)
        (held,) = cp.ok("GET", path)["items"]
        assert held["metricLabels"]["term"] == "guard", held
        assert float(parse_quantity(held["value"])) == pytest.approx(2.5 / 3), held
        # its own Deployment and HPA: the control plane is shared by the session's tests
        _, hpa = _objects()
        hpa["metadata"]["name"] = hpa["spec"]["scaleTargetRef"]["name"] = "guarded"
        hpa["spec"]["metrics"][0]["external"]["metric"]["selector"]["matchLabels"] = {
            "service": "chat"
        }
        cp.create(aggregated.deployment("guarded", 3))
        for i in range(3):
            ready_pod(cp, i, "guarded")
        hpa_path = f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers/guarded"
        released: list[float] = []

        def tick(now: float, run: _Run) -> None:
            if not released and now >= 2 * WINDOW_S + 2 * SYNC_S:
                status = cp.ok("GET", hpa_path)["status"]
                (current,) = status["currentMetrics"]
                value = current["external"]["current"]["value"]
                assert float(parse_quantity(value)) == pytest.approx(2.5 / 3, abs=1e-3)
                assert status["desiredReplicas"] == 3, status
                assert [r for _, r in run.seen] == [3], run  # held past two windows
                released.append(now)
            # after the hold, one request every second push: 1 request/s
            engines.push(3, 0.025, every=2 if released else 1)

        run = _run_hpa(cp, hpa, tick, lambda r: bool(r.seen) and r.seen[-1][1] == 2)
    seen = run.seen
    counts = [r for _, r in seen]
    assert counts == [3, 2], seen
    assert released and seen[1][0] >= released[0], seen
    record(
        "hpa-scale-down-guard",
        {
            "scale-down window s": WINDOW_S,
            "sync period s": SYNC_S,
            "ready replicas": 3,
            "served while held": held["value"],
            "term while held": held["metricLabels"]["term"],
            "held for s": round(released[0], 1),
            "replica counts": counts,
        },
    )
