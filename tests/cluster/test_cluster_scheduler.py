"""Issue 26, point 4, on a real kube-scheduler v1.26 with the shipped
KubeSchedulerConfiguration (manifests/extender/configmap-scheduler.yaml; only urlPrefix
changed, to the extender on a loopback port), under the shipped kvspread-scheduler RBAC
(leader election included), calling the extender over HTTP: a burst of 24 identical
replicas onto 4 identical GPU nodes (Node objects only: pods bind, nothing runs). The
extender breaks ties itself, so the ledger books every pod where the scheduler binds it."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import yaml

from extender.config import ExtenderConfig
from extender.run import build
from extender.scoring import SPREAD_SLACK
from kvspread.clock import SystemClock
from kvspread.signals import GpuSignal, NodeSignals, encode_signals
from tests.cluster.captures import record
from tests.cluster.controlplane import ROOT, ControlPlane
from tests.cluster.install import SERVICE_ACCOUNTS, install
from tests.extender.test_extender_ledger_bindings import replica
from tests.extender.uvicorn_server import serve_app
from tests.fake_kube import make_node

NODES = [f"sched-gpu-{i}" for i in range(4)]
PODS = 24
WAIT_S = 60.0


def shipped_scheduler_config(url: str) -> dict[str, Any]:
    cm = yaml.safe_load((ROOT / "manifests/extender/configmap-scheduler.yaml").read_text())
    cfg: dict[str, Any] = yaml.safe_load(cm["data"]["config.yaml"])
    (ext,) = cfg["extenders"]
    ext["urlPrefix"] = url
    return cfg


def _created(obj: dict[str, Any]) -> dict[str, Any]:
    """A fake-API object as a client would POST it (no server-set metadata)."""
    md = obj["metadata"]
    for k in ("resourceVersion", "uid", "creationTimestamp"):
        md.pop(k, None)
    return obj


def test_a_burst_of_ties_is_booked_where_the_real_scheduler_binds(cp: ControlPlane) -> None:
    install(cp)
    now = time.time()
    gpus = tuple(GpuSignal(index=i, mem_total_mib=80 * 1024, mem_used_mib=0) for i in range(8))
    doc = encode_signals(NodeSignals(ts=now, gpus=gpus))
    for n in NODES:
        node = make_node(
            n, annotations={"kvspread.io/signals": doc}, allocatable={"nvidia.com/gpu": "8"}
        )
        cp.create(_created(node))
        # the TaintNodesByCondition admission plugin taints every new Node not-ready; the
        # node lifecycle controller (absent here) lifts it once the kubelet reports Ready
        cp.ok(
            "PATCH",
            f"/api/v1/nodes/{n}",
            {"spec": {"taints": None}},
            content_type="application/merge-patch+json",
        )
    assert (
        cp.ok("GET", f"/api/v1/nodes/{NODES[0]}")["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    )
    ns, sa = SERVICE_ACCOUNTS["extender"]
    kube = {"kubeconfig": str(cp.sa_kubeconfig(ns, sa)), "node_signals": False}
    running = build(ExtenderConfig.from_mapping({"kubernetes": kube}), SystemClock())
    for r in running.reflectors:
        r.start()
    sched_ns, sched_sa = SERVICE_ACCOUNTS["scheduler"]
    sched_kc = cp.sa_kubeconfig(sched_ns, sched_sa)
    cp.service_account("serving", "default")
    try:
        with serve_app(running.app) as url, cp.scheduler(shipped_scheduler_config(url), sched_kc):
            for i in range(PODS):  # the burst: all pods at once
                pod = replica(i)  # the CI replay's replica: same labels, 20Gi, 1 GPU
                pod["spec"]["automountServiceAccountToken"] = False
                cp.create(_created(pod))
            deadline = time.monotonic() + WAIT_S
            while True:
                pods = cp.ok("GET", "/api/v1/namespaces/serving/pods")["items"]
                bound = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods}
                if all(bound.values()) and len(running.state.ledger) == 0:
                    break
                assert time.monotonic() < deadline, (
                    bound,
                    (cp.tmp / "kube-scheduler.log").read_text()[-3000:],
                )
                time.sleep(0.5)
        bindings = running.state.ledger.bindings()
    finally:
        for r in running.reflectors:
            r.stop()
    per_node = Counter(bound.values())
    assert bindings == {"as_booked": PODS, "elsewhere": 0}, (bindings, per_node)
    assert sum(per_node.values()) == PODS
    assert max(per_node.values()) - min(per_node.values()) <= SPREAD_SLACK, per_node
    record(
        "scheduler-burst",
        {
            "pods": PODS,
            "nodes": len(NODES),
            "ledger bindings": bindings,
            "pods per node": dict(sorted(per_node.items())),
        },
    )
