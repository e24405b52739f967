"""Decisions a platform engineer can trust (issue 10): re-scoring one pod is stable, stale
signals never win, replicas spread, the tie-break only breaks ties."""

from __future__ import annotations

import json

from extender.config import ExtenderConfig
from extender.run import Running, build
from kvspread.clock import FakeClock
from kvspread.signals import GpuSignal, NodeSignals, encode_signals
from tests.extender.decide import filter_doc, prioritize_scores
from tests.fake_kube import make_node, make_pod

GIB = 1024.0


def signals(clock: FakeClock, used_gib: float, gpus: int = 2, age_s: float = 0.0) -> str:
    return encode_signals(
        NodeSignals(
            ts=clock.now() - age_s,
            gpus=tuple(
                GpuSignal(index=i, mem_total_mib=80 * GIB, mem_used_mib=used_gib * GIB)
                for i in range(gpus)
            ),
        )
    )


def cluster(clock: FakeClock, nodes: list[dict]) -> Running:
    """A cluster-mode extender whose caches are fed directly (no reflectors started)."""
    cfg = ExtenderConfig.from_mapping({"kubernetes": {"api_server": "http://127.0.0.1:9"}})
    running = build(cfg, clock)
    running.state.replace_nodes(nodes)  # type: ignore[attr-defined]
    running.state.replace_pods([])  # type: ignore[attr-defined]
    return running


def gpu_pod(name: str, mem: str = "20Gi", model: str | None = None, uid: str = "") -> dict:
    labels = {"kvspread.io/model": model} if model else {}
    pod = make_pod(
        name, "serving", gpus=1, labels=labels, annotations={"kvspread.io/gpu-memory": mem}
    )
    if uid:
        pod["metadata"]["uid"] = uid
    return pod


def names_body(pod: dict, names: list[str]) -> str:
    return json.dumps({"Pod": pod, "NodeNames": names})


# --- 1. a pod's own earlier placement never counts against it ---------------------------


def test_rescoring_the_same_pod_gives_the_same_ranking() -> None:
    clock = FakeClock()
    names = [f"idem-{i:02d}" for i in range(6)]
    running = cluster(
        clock, [make_node(n, annotations={"kvspread.io/signals": signals(clock, 0)}) for n in names]
    )
    pod = gpu_pod("retry", model="llama", uid="uid-retry")
    first = prioritize_scores(running.extender, names_body(pod, names))
    for _ in range(3):
        assert prioritize_scores(running.extender, names_body(pod, names)) == first


def test_a_pods_own_claim_does_not_fail_it_in_filter() -> None:
    clock = FakeClock()
    # one node with 60 GiB free on its only GPU: room for one 50 GiB pod
    node = make_node("n1", annotations={"kvspread.io/signals": signals(clock, 20, gpus=1)})
    running = cluster(clock, [node])
    pod = gpu_pod("big", mem="50Gi", uid="uid-big")
    assert prioritize_scores(running.extender, names_body(pod, ["n1"]))["n1"] > 0
    assert [p.pod for p in running.state.ledger.on_node("n1")] == ["serving/big"]
    # the scheduler retries the same pod (bind failed): its own ledger entry is no obstacle
    assert filter_doc(running.extender, names_body(pod, ["n1"]))["NodeNames"] == ["n1"]
    # ... in full-NodeList mode too
    full = json.dumps({"Pod": pod, "Nodes": {"items": [node]}})
    assert filter_doc(running.extender, full)["FailedNodes"] == {}
    # another pod still sees the claim
    other = gpu_pod("other", mem="50Gi", uid="uid-other")
    assert "n1" in filter_doc(running.extender, names_body(other, ["n1"]))["FailedNodes"]


def test_standalone_rescoring_is_stable_too() -> None:
    clock = FakeClock()
    running = build(ExtenderConfig.from_mapping({"server": {"standalone": True}}), clock)
    nodes = [
        make_node(f"s{i}", annotations={"kvspread.io/signals": signals(clock, 0)}) for i in range(4)
    ]
    pod = gpu_pod("retry", model="llama", uid="uid-s")
    body = json.dumps({"Pod": pod, "Nodes": {"items": nodes}})
    first = prioritize_scores(running.extender, body)
    assert prioritize_scores(running.extender, body) == first
