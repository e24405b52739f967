"""A tensor-parallel pod (`nvidia.com/gpu: 4`) through the extender's real ingest, filter and
scoring: it needs that many whole free GPUs on one node, never a taken one, and prefers a
node whose GPUs share NVLink (its all-reduces cross PCIe otherwise)."""

from __future__ import annotations

from typing import Any

from extender.config import ScoringConfig
from extender.fit import check_fit
from extender.model import GpuState, NodeState, PodShape
from extender.objects import parse_node, parse_pod
from extender.scoring import score_nodes
from extender.shapes import ShapeDistribution
from extender.state import build_node_state
from kvspread import names
from kvspread.signals import GpuSignal, NodeSignals, encode_signals

CFG = ScoringConfig()
G80 = 81920.0
NOW = 1_000.0


def pod_dict(gpus: int, mem: str | None, name: str = "chat-70b-0", bound: str = "") -> Any:
    """A v1 Pod of a vLLM replica asking for `gpus` GPUs (and `mem` on each, when given)."""
    annotations = {} if mem is None else {names.ANNOTATION_GPU_MEMORY: mem}
    spec: dict[str, Any] = {
        "containers": [{"name": "vllm", "resources": {"limits": {names.RESOURCE_GPU: str(gpus)}}}]
    }
    if bound:
        spec["nodeName"] = bound
    return {
        "metadata": {
            "namespace": "inference",
            "name": name,
            "uid": f"uid-{name}",
            "labels": {names.LABEL_MODEL: "llama-3-70b", names.LABEL_MODALITY: "text"},
            "annotations": annotations,
        },
        "spec": spec,
        "status": {"phase": "Running" if bound else "Pending"},
    }


def node_state(name: str, used: list[float], nvlink: bool, pods: tuple[Any, ...] = ()) -> NodeState:
    """A NodeState built by the extender's own code from a Node with fresh signals."""
    sig = NodeSignals(
        ts=NOW - 5.0,
        node=name,
        gpus=tuple(
            GpuSignal(index=i, mem_total_mib=G80, mem_used_mib=u, uuid=f"GPU-{name}-{i}")
            for i, u in enumerate(used)
        ),
    )
    node = {
        "metadata": {
            "name": name,
            "labels": {names.LABEL_POOL: "language", names.LABEL_NVLINK: str(nvlink).lower()},
            "annotations": {names.ANNOTATION_SIGNALS: encode_signals(sig)},
        },
        "status": {"allocatable": {names.RESOURCE_GPU: str(len(used))}},
    }
    infos = [parse_pod(p) for p in pods]
    return build_node_state(parse_node(node), infos, (), NOW, CFG)


def test_a_four_gpu_pod_parses_to_four_gpus_with_memory_on_each() -> None:
    shape = parse_pod(pod_dict(4, "80Gi")).shape
    assert shape.gpus == 4
    assert shape.mem_per_gpu_mib == G80
    assert parse_pod(pod_dict(4, None)).shape.mem_per_gpu_mib is None


def test_filter_counts_whole_free_gpus() -> None:
    pod = parse_pod(pod_dict(4, "80Gi")).shape
    # 8 GPUs, five held by other tenants' whole-GPU jobs: three free
    three = node_state("n3", [G80] * 5 + [0.0] * 3, True)
    four = node_state("n4", [G80] * 4 + [0.0] * 4, True)
    bad = check_fit(pod, three, CFG)
    assert not bad.fits
    assert "needs 4 GPUs with 80 GiB free each, node has 3" in bad.reason
    assert check_fit(pod, four, CFG).fits
    # without the memory annotation a GPU pod needs idle GPUs: the same count
    whole = parse_pod(pod_dict(4, None)).shape
    assert not check_fit(whole, three, CFG).fits
    assert check_fit(whole, four, CFG).fits


def test_a_bound_four_gpu_pod_claims_four_gpus_until_the_collector_shows_it() -> None:
    bound = pod_dict(4, "80Gi", bound="n")
    state = node_state("n", [0.0] * 8, True, (bound,))
    claimed = [g for g in state.gpus if g.allocated_mib > 0]
    assert len(claimed) == 4
    assert all(g.allocated_mib == G80 for g in claimed)
    # the node now has 4 free GPUs: one more TP-4 pod fits, a fifth GPU is not there for TP-8
    assert check_fit(parse_pod(pod_dict(4, "80Gi")).shape, state, CFG).fits
    assert not check_fit(parse_pod(pod_dict(5, "80Gi")).shape, state, CFG).fits


def test_scoring_chooses_four_free_gpus_and_never_a_taken_one() -> None:
    pod = parse_pod(pod_dict(4, "80Gi")).shape
    used = [G80, 0.0, G80, 0.0, 0.0, G80, 0.0, 0.0]
    states = [node_state("n", used, True)]
    shapes = ShapeDistribution(CFG)
    shapes.observe(pod)
    (score,) = score_nodes(pod, states, CFG, shapes.snapshot())
    assert score.fits
    assert len(score.gpus_chosen) == 4
    assert all(used[j] == 0.0 for j in score.gpus_chosen)


def test_a_multi_gpu_pod_prefers_the_nvlink_node_a_one_gpu_pod_does_not_care() -> None:
    used = [G80] * 2 + [0.0] * 6
    nodes = [node_state("pcie", used, False), node_state("nvswitch", used, True)]
    shapes = ShapeDistribution(CFG)
    tp4 = parse_pod(pod_dict(4, "80Gi")).shape
    one = PodShape(gpus=1, mem_per_gpu_mib=G80, model="llama-3-8b", modality="text")
    shapes.observe(tp4)
    shapes.observe(one)
    snap = shapes.snapshot()
    by_name = {s.name: s for s in score_nodes(tp4, nodes, CFG, snap)}
    assert by_name["nvswitch"].terms.modality > by_name["pcie"].terms.modality
    assert by_name["nvswitch"].score > by_name["pcie"].score
    single = {s.name: s for s in score_nodes(one, nodes, CFG, snap)}
    assert single["nvswitch"].terms.modality == single["pcie"].terms.modality


def test_gpu_states_of_other_tenants_are_measured_not_claimed() -> None:
    state = node_state("n", [G80, 0.0], True)
    assert state.gpus[0] == GpuState(
        total_mib=G80, used_mib=G80, allocated_mib=0.0, util=None, pods=1
    )
