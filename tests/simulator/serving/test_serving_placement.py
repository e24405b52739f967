"""The three placement policies on hand-built cluster states."""

from __future__ import annotations

import numpy as np
import pytest

from extender.config import ScoringConfig
from extender.model import PodShape
from extender.scoring import score_nodes
from extender.shapes import ShapeDistribution
from simulator.serving.cluster import Gpu, Node
from simulator.serving.placement import (
    BoundPod,
    ClusterSnapshot,
    Kvspread,
    MemoryWeighted,
    NodeView,
    RoundRobin,
    Want,
    make_policy,
)

WANT = Want(model="qwen2-vl-7b", modality="image", qos="realtime", request_gib=32.0)


def cluster(used: list[list[float]], pools: tuple[str, ...] = ("mixed",)) -> list[Node]:
    """Nodes whose GPUs (80 GiB) hold one foreign pod of the given GiB each (0: empty)."""
    nodes = []
    for i, row in enumerate(used):
        gpus = []
        for j, gib in enumerate(row):
            g = Gpu(i, j, 80.0)
            if gib > 0:
                g.claims[f"x-{i}-{j}"] = gib
                g.held[f"x-{i}-{j}"] = gib
                g.occupants.append(f"x-{i}-{j}")
            gpus.append(g)
        nodes.append(Node(f"gpu-node-{i}", i, pools[i % len(pools)], False, gpus))
    return nodes


def views(nodes: list[Node], ts: float = 100.0) -> dict[int, NodeView]:
    return {
        n.index: NodeView(
            ts=ts,
            node=n.name,
            used_mib=tuple(g.used_gib * 1024 for g in n.gpus),
            total_mib=tuple(g.total_gib * 1024 for g in n.gpus),
            streams=3,
            image_token_share=0.25,
            p95_s=2.0,
        )
        for n in nodes
    }


def test_round_robin_cycles_nodes_and_ignores_memory() -> None:
    nodes = cluster([[70, 70], [0, 0], [75, 0]])
    rr = RoundRobin(np.random.default_rng(0))
    picks = [rr.choose(WANT, ClusterSnapshot(nodes, 4)) for _ in range(4)]
    # node 0 first although no GPU there has 32 GiB free; GPU with fewest pods
    assert picks[0] == (0, 0)
    assert picks[1] == (1, 0)
    assert picks[2] == (2, 1)
    assert picks[3] == (0, 0)


def test_round_robin_respects_time_slicing_slots() -> None:
    nodes = cluster([[10], [10]])
    rr = RoundRobin(np.random.default_rng(0))
    assert rr.choose(WANT, ClusterSnapshot(nodes, 1)) is None
    assert rr.choose(WANT, ClusterSnapshot(nodes, 2)) == (0, 0)


def test_memory_weighted_takes_the_node_with_most_free_memory() -> None:
    nodes = cluster([[40, 40], [0, 60], [70, 70]])
    mw = MemoryWeighted(np.random.default_rng(0))
    # node 1 has 80 + 20 = 100 GiB free (node 0: 80); on it the GPU with most free
    assert mw.choose(WANT, ClusterSnapshot(nodes, 4)) == (1, 0)
    full = cluster([[60, 60]])
    assert mw.choose(WANT, ClusterSnapshot(full, 4)) is None


def test_kvspread_picks_the_extenders_best_score() -> None:
    nodes = cluster(
        [[40, 0, 0, 0], [48, 48, 0, 0], [20, 50, 60, 8]], pools=("language", "vision", "mixed")
    )
    vw = views(nodes)
    bound = {1: [BoundPod("qwen2-vl-7b", "image", "realtime", 32.0, name="vision-0")]}
    kv = Kvspread(np.random.default_rng(0))
    pick = kv.choose(WANT, ClusterSnapshot(nodes, 4, vw, bound, 105.0))
    assert pick is not None
    # recompute with the extender directly on the same states and shape distribution
    cfg = ScoringConfig()
    shapes = ShapeDistribution(cfg)
    pod = PodShape(
        gpus=1,
        mem_per_gpu_mib=32 * 1024.0,
        model=WANT.model,
        modality=WANT.modality,
        qos=WANT.qos,
    )
    shapes.observe(pod)
    states = kv.node_states(ClusterSnapshot(nodes, 4, vw, bound, 105.0))
    scores = score_nodes(pod, states, cfg, shapes.snapshot())
    best = max(s.score for s in scores)
    winners = {s.name for s in scores if s.score == best}
    assert nodes[pick[0]].name in winners
    chosen = next(s for s in scores if s.name == nodes[pick[0]].name)
    assert pick[1] == chosen.gpus_chosen[0]


def test_kvspread_reads_signals_and_pods_like_the_extender() -> None:
    nodes = cluster([[40, 0]], pools=("vision",))
    nodes[0].nvlink = True
    bound = {0: [BoundPod("qwen2-vl-7b-32k", "multi-image", "batch", 48.0, name="docs-3")]}
    kv = Kvspread(np.random.default_rng(0))
    (state,) = kv.node_states(ClusterSnapshot(nodes, 4, views(nodes), bound, 110.0))
    assert state.fresh and state.pool == "vision" and state.nvlink
    assert state.streams == 3 and state.image_token_share == 0.25 and state.p95_s == 2.0
    assert state.model_replicas == {"qwen2-vl-7b-32k": 1}
    assert [g.used_mib for g in state.gpus] == [40 * 1024.0, 0.0]
    # the extender guesses where the bound 48Gi pod sits: the GPU with room for it
    assert sum(g.allocated_mib for g in state.gpus) == 48 * 1024.0
    # signals older than the extender's stale age give a neutral, unfiltered node
    (stale,) = kv.node_states(ClusterSnapshot(nodes, 4, views(nodes, ts=0.0), bound, 1000.0))
    assert stale.signals == "stale" and not stale.gpus


def test_signals_document_round_trips() -> None:
    from kvspread.signals import decode_signals

    nodes = cluster([[40, 0]])
    view = NodeView(
        ts=5.0,
        node="gpu-node-0",
        used_mib=(40960.0, 0.0),
        total_mib=(81920.0, 81920.0),
        streams=7,
        image_token_share=None,
        p95_s=None,
        models=(("llama-3-8b",), ()),
        kv_blocks=((2751, 100), None),
    )
    doc = decode_signals(view.annotation())
    assert doc.streams == 7 and doc.image_token_share is None and doc.p95_s is None
    assert doc.gpus is not None and doc.gpus[0].kv_blocks_total == 2751
    assert doc.gpus[0].models == ("llama-3-8b",) and doc.gpus[1].kv_blocks_total is None
    assert "util" in doc.absent
    assert nodes  # the cluster helper is shared with the tests above


def test_kvspread_filter_refuses_nodes_without_room() -> None:
    nodes = cluster([[60, 60], [70, 50]])
    kv = Kvspread(np.random.default_rng(0))
    assert kv.choose(WANT, ClusterSnapshot(nodes, 4, views(nodes), {}, 105.0)) is None


def test_kvspread_respects_time_slicing_slots() -> None:
    nodes = cluster([[10, 10]])
    kv = Kvspread(np.random.default_rng(0))
    assert kv.choose(WANT, ClusterSnapshot(nodes, 1, views(nodes), {}, 105.0)) is None


def test_unknown_policy() -> None:
    with pytest.raises(ValueError, match="unknown placement policy"):
        make_policy("best-effort", np.random.default_rng(0))
