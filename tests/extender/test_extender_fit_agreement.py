"""Issue 26, points 5 and 6 of its reproduction: /filter and /prioritize use one fit
predicate (the device-plugin rule included, with its message), and a stale node is failed
by what its last document proves impossible (GPU count and sizes), else passes."""

from __future__ import annotations

import json

from kvspread.clock import FakeClock
from kvspread.signals import GpuSignal, NodeSignals, encode_signals
from tests.extender.decide import filter_doc, prioritize_scores
from tests.extender.test_extender_decisions import cluster
from tests.fake_kube import make_node, make_pod

MIB_80G = 81920.0


def doc(clock: FakeClock, free_mib: list[float], age_s: float = 0.0, total: float = MIB_80G) -> str:
    gpus = tuple(
        GpuSignal(index=i, mem_total_mib=total, mem_used_mib=total - f)
        for i, f in enumerate(free_mib)
    )
    return encode_signals(NodeSignals(ts=clock.now() - age_s, gpus=gpus))


def node(name: str, signals: str | None, gpus: int = 4) -> dict:
    ann = {"kvspread.io/signals": signals} if signals else {}
    return make_node(name, annotations=ann, allocatable={"nvidia.com/gpu": str(gpus)})


def body(mem: str, gpus: int, names: list[str]) -> str:
    pod = make_pod("p", "serving", gpus=gpus, annotations={"kvspread.io/gpu-memory": mem})
    return json.dumps({"Pod": pod, "NodeNames": names})


def test_filter_and_prioritize_agree_on_the_device_plugin_rule() -> None:
    """The issue's case: a 24Gi pod, a fresh node with (26000, 5000, 5000, 5000) MiB free
    and a node whose signals are 600 s old. Before, /filter passed both and /prioritize
    marked the fresh one unfit and scored the stale one 6 against 0."""
    clock = FakeClock()
    fresh = node("fresh", doc(clock, [26000, 5000, 5000, 5000]))
    stale = node("stale", doc(clock, [MIB_80G] * 4, age_s=600))
    running = cluster(clock, [fresh, stale])
    b = body("24Gi", 1, ["fresh", "stale"])
    out = filter_doc(running.extender, b)
    assert out["NodeNames"] == ["stale"]
    message = out["FailedNodes"]["fresh"]
    assert "device plugin hands out the GPU with the fewest pods" in message
    assert message.startswith("kvspread: needs 1 GPU with 24 GiB free")
    scores = prioritize_scores(running.extender, b)
    explained = running.extender.explain("serving/p")
    assert explained is not None
    fits = {s["node"]: s["fits"] for s in explained["prioritize"]["scores"]}
    assert fits == {"fresh": False, "stale": True} and scores["fresh"] == 0


def test_a_stale_node_fails_what_its_last_document_rules_out() -> None:
    """2 x 90Gi on 80 GiB GPUs: bound to a stale node before; now Pending everywhere."""
    clock = FakeClock()
    nodes = [
        node("stale-80g", doc(clock, [MIB_80G] * 8, age_s=600), gpus=8),
        node("stale-4gpu", doc(clock, [MIB_80G] * 4, age_s=600)),
        node("no-collector", None),  # no document at all: nothing is proven, it passes
    ]
    running = cluster(clock, nodes)
    out = filter_doc(running.extender, body("90Gi", 2, [n["metadata"]["name"] for n in nodes]))
    assert out["NodeNames"] == ["no-collector"]
    assert out["FailedNodes"]["stale-80g"] == (
        "kvspread: needs 2 GPUs with 90 GiB free each, the node's last (stale) signals "
        "list 8 GPUs of at most 80 GiB"
    )
    # GPU count: 8 GPUs asked of a node whose last document lists 4
    out = filter_doc(running.extender, body("10Gi", 8, ["stale-80g", "stale-4gpu"]))
    assert out["NodeNames"] == ["stale-80g"] and "list 4 GPUs" in out["FailedNodes"]["stale-4gpu"]
    # what the document allows still passes, however old (fail-open as before)
    out = filter_doc(running.extender, body("70Gi", 4, ["stale-80g", "stale-4gpu"]))
    assert out["NodeNames"] == ["stale-80g", "stale-4gpu"]


def test_mixed_sizes_are_failed_only_when_proven() -> None:
    clock = FakeClock()
    mixed = NodeSignals(
        ts=clock.now() - 600,
        gpus=(
            GpuSignal(index=0, mem_total_mib=MIB_80G, mem_used_mib=0),
            GpuSignal(index=1, mem_total_mib=40960, mem_used_mib=0),
        ),
    )
    running = cluster(clock, [node("mixed", encode_signals(mixed), gpus=2)])
    # one GPU of 60 GiB: the 80 GiB GPU can hold it
    assert filter_doc(running.extender, body("60Gi", 1, ["mixed"]))["NodeNames"] == ["mixed"]
    # two of 60 GiB: only one GPU is that big
    assert filter_doc(running.extender, body("60Gi", 2, ["mixed"]))["NodeNames"] == []
