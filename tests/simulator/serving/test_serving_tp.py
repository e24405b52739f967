"""Tensor-parallel replicas in the serving simulation: whole GPUs of one node (one NVLink
island where the node has one), kube-scheduler's resource fit and scores for a multi-GPU
pod, the extender's placement of it, the TP cost and the 16-node presets."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kvspread.settings import ConfigError
from simulator.serving.cluster import Gpu, Node, device_plugin_gpus, island_ids, resource_fit
from simulator.serving.config import config_from_mapping, default_config
from simulator.serving.costmodel import kv_pool_tokens, tp_speedup
from simulator.serving.kubedefault import KubeDefault, scores
from simulator.serving.placement import ClusterSnapshot, Kvspread, NodeView, Want
from simulator.serving.presets import CLUSTERS, real_workload_mapping
from simulator.serving.sim import simulate

TP4 = Want(model="llama-3-70b", modality="text", qos="realtime", request_gib=80.0, gpus=4)


def node(i: int, taken: tuple[int, ...], nvlink: bool = True, island: int = 0) -> Node:
    """An 8 x 80 GiB node whose GPUs `taken` hold another tenant's whole-GPU job."""
    gpus = []
    for j in range(8):
        g = Gpu(i, j, 80.0)
        if j in taken:
            g.claims[f"bg-{i}-{j}"] = 80.0
            g.held[f"bg-{i}-{j}"] = 80.0
            g.occupants.append(f"bg-{i}-{j}")
        gpus.append(g)
    return Node(f"gpu-node-{i}", i, "language", nvlink, gpus, island_ids(8, nvlink, island))


def views(nodes: list[Node]) -> dict[int, NodeView]:
    return {
        n.index: NodeView(
            ts=100.0,
            node=n.name,
            used_mib=tuple(g.used_gib * 1024 for g in n.gpus),
            total_mib=tuple(g.total_gib * 1024 for g in n.gpus),
            streams=0,
            image_token_share=None,
        )
        for n in nodes
    }


def test_island_ids() -> None:
    assert island_ids(8, False, 0) == tuple(range(8))  # PCIe only: every GPU alone
    assert island_ids(8, True, 0) == (0,) * 8  # NVSwitch: one island
    assert island_ids(8, True, 4) == (0, 0, 0, 0, 1, 1, 1, 1)


def test_device_plugin_keeps_a_tp_pod_inside_one_island() -> None:
    n = node(0, taken=(1,), island=4)
    assert [g.index for g in device_plugin_gpus(n, 4, 1) or []] == [4, 5, 6, 7]
    assert [g.index for g in device_plugin_gpus(n, 2, 1) or []] == [0, 2]
    # three free in each island: the set has to cross islands
    split = node(1, taken=(1, 5), island=4)
    assert [g.index for g in device_plugin_gpus(split, 4, 1) or []] == [0, 2, 3, 4]
    assert not split.one_island([0, 2, 3, 4])
    assert device_plugin_gpus(node(2, taken=(0, 1, 2, 3, 4)), 4, 1) is None


def test_resource_fit_needs_that_many_free_gpus() -> None:
    assert resource_fit(node(0, taken=(0, 1, 2, 3)), 1, 4)
    assert not resource_fit(node(0, taken=(0, 1, 2, 3, 4)), 1, 4)
    assert resource_fit(node(0, taken=(0, 1, 2, 3, 4, 5, 6)), 1, 1)


def test_kube_default_filters_on_free_gpus_and_scales_requests_with_them() -> None:
    nodes = [node(0, taken=(0, 1, 2, 3, 4)), node(1, taken=(0, 1)), node(2, taken=())]
    feasible, total = scores(nodes, 1, {}, TP4.model, gpus=4)
    assert [n.index for n in feasible] == [1, 2]
    # LeastAllocated over CPU and memory: the incoming pod requests 4 x POD_CPU, so the
    # empty node scores above the one whose GPUs (and their CPU) are partly taken
    assert total[1] > total[0]
    _, one = scores(nodes[2:], 1, {}, TP4.model, gpus=1)
    _, four = scores(nodes[2:], 1, {}, TP4.model, gpus=4)
    assert one[0] > four[0]
    pick = KubeDefault(np.random.default_rng(0)).choose(TP4, ClusterSnapshot(nodes, 1))
    assert pick == (2, 0)


def test_kvspread_places_a_tp4_pod_through_the_extender_on_the_nvlink_node() -> None:
    nodes = [
        node(0, taken=(), nvlink=False),
        node(1, taken=(0, 1), nvlink=True),
        node(2, taken=(0, 1, 2, 3, 4), nvlink=True),  # 3 free: filtered
    ]
    kv = Kvspread(np.random.default_rng(0))
    pick = kv.choose(TP4, ClusterSnapshot(nodes, 1, views(nodes), {}, 105.0))
    assert pick is not None and pick[0] == 1
    scored = dict(kv.last_scores)
    assert "gpu-node-2" not in scored  # kube-scheduler's own fit removed it first
    assert scored["gpu-node-1"] > scored["gpu-node-0"]
    assert pick[1] not in (0, 1)


def test_tp_speedup_reproduces_the_published_figure() -> None:
    cost = default_config().cost
    # TensorRT-LLM A100 FP16: LLaMA-7B TP1 133 ms, LLaMA-70B TP4 377 ms at 2,048 input;
    # 70B has 68.98 / 6.74 = 10.23x the parameters
    published = 133.0 * 68.98 / 6.74 / 377.0
    assert tp_speedup(cost, 4, True) == pytest.approx(published, rel=0.01)
    assert tp_speedup(cost, 1, True) == 1.0
    assert 1.0 < tp_speedup(cost, 4, False) < tp_speedup(cost, 4, True) < 4.0
    assert tp_speedup(cost, 2, True) < tp_speedup(cost, 4, True)


def test_a_70b_model_fits_on_four_gpus_not_on_one() -> None:
    cfg = default_config()
    m = cfg.models["llama-3-70b"]
    assert kv_pool_tokens(cfg.cost, m, 80.0) == 0
    pool = kv_pool_tokens(cfg.cost, m, 4 * 80.0, gpus=4)
    # 4 x 80 GiB - 141.2 GB weights - 4 x 4 GB reserve, 320 KiB per token
    expected = (4 * 80 * 2**30 - 141.2e9 - 16e9) / 327_680
    assert pool == pytest.approx(expected, abs=16)
    assert pool > m.max_model_len


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"services": {"chat": {"tensor_parallel": 2}}}, "services.chat.tensor_parallel"),
        (
            {"cluster": {"slots_per_gpu": 1}, "services": {"chat": {"tensor_parallel": 5}}},
            "a GPU count in [1, 4]",
        ),
        ({"cluster": {"nvlink_island_gpus": [-1]}}, "cluster.nvlink_island_gpus"),
    ],
)
def test_bad_tensor_parallel_settings_are_clear_errors(
    override: dict[str, Any], needle: str
) -> None:
    with pytest.raises(ConfigError) as err:
        config_from_mapping(override)
    assert needle in str(err.value)


def test_presets_are_sixteen_nodes_and_the_whole_gpu_one_has_a_tp_model() -> None:
    assert CLUSTERS == ("small", "shared", "whole-gpu")
    small = config_from_mapping(real_workload_mapping("small"))
    assert small.cluster.nodes == 3
    for name in ("shared", "whole-gpu"):
        cfg = config_from_mapping(real_workload_mapping(name))
        assert cfg.cluster.nodes >= 16
    shared = config_from_mapping(real_workload_mapping("shared"))
    assert shared.cluster.slots_per_gpu > 1
    assert all(s.tensor_parallel == 1 for s in shared.services.values())
    whole = config_from_mapping(real_workload_mapping("whole-gpu"))
    assert whole.cluster.slots_per_gpu == 1 and whole.cluster.gpus_per_node == 8
    tp = {n: s.tensor_parallel for n, s in whole.services.items()}
    assert tp["chat"] == 4 and whole.services["chat"].model == "llama-3-70b"
    assert set(whole.cluster.pools) == {"language", "mixed", "vision"}
    nv = [whole.cluster.nvlink[i % len(whole.cluster.nvlink)] for i in range(16)]
    assert any(nv) and not all(nv)


def short(cluster: str, seconds: float) -> Any:
    m = real_workload_mapping(cluster)
    m.update({"duration_s": seconds, "warmup_s": 30.0, "workload_start_s": 36600.0})
    return config_from_mapping(m)


@pytest.mark.parametrize("policy", ["kube-default", "kvspread"])
def test_whole_gpu_run_gives_each_tp_replica_four_gpus_of_one_node(policy: str) -> None:
    cfg = short("whole-gpu", 90.0)
    r = simulate(cfg, policy, 3, autoscaler="request-rate")
    chat = [p for p in r.pods if p.service == "chat" and p.node >= 0]
    assert chat
    for p in chat:
        assert len(p.gpus) == 4 and len(set(p.gpus)) == 4
        assert p.gpu == p.gpus[0]
        held = p.gpu_seconds / max(
            1e-9, (p.ended_at if p.ended_at == p.ended_at else r.sim_end) - p.placed_at
        )
        assert held == pytest.approx(4.0)  # 4 whole GPUs charged
    others = [p for p in r.pods if p.service != "chat" and p.node >= 0]
    assert others and all(len(p.gpus) == 1 for p in others)
    # nothing shared: no two pods ever on one GPU at the same time
    spans: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for p in r.pods:
        if p.node < 0:
            continue
        end = p.ended_at if p.ended_at == p.ended_at else r.sim_end
        for j in p.gpus:
            spans.setdefault((p.node, j), []).append((p.placed_at, end))
    for s in spans.values():
        s.sort()
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(s, s[1:], strict=False))
    done = [q for q in r.requests if q.service == "chat" and q.status == "ok"]
    assert len(done) > 50
    assert r.start_failures == 0


def test_shared_preset_runs_on_sixteen_nodes() -> None:
    cfg = short("shared", 60.0)
    r = simulate(cfg, "kvspread", 1, autoscaler="slo")
    assert {p.node for p in r.pods if p.node >= 0} <= set(range(16))
    assert sum(1 for q in r.requests if q.status == "ok") > 100
