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


def views(nodes: list[Node]) -> dict[int, NodeView]:
    return {
        n.index: NodeView(
            tuple(g.used_gib * 1024 for g in n.gpus), streams=0, image_token_share=None
        )
        for n in nodes
    }


def test_round_robin_cycles_nodes_and_ignores_memory() -> None:
    nodes = cluster([[70, 70], [0, 0], [75, 0]])
    rr = RoundRobin(np.random.default_rng(0))
    picks = [rr.choose(WANT, nodes, 4, {}, {}) for _ in range(4)]
    # node 0 first although no GPU there has 32 GiB free; GPU with fewest pods
    assert picks[0] == (0, 0)
    assert picks[1] == (1, 0)
    assert picks[2] == (2, 1)
    assert picks[3] == (0, 0)


def test_round_robin_respects_time_slicing_slots() -> None:
    nodes = cluster([[10], [10]])
    rr = RoundRobin(np.random.default_rng(0))
    assert rr.choose(WANT, nodes, 1, {}, {}) is None
    assert rr.choose(WANT, nodes, 2, {}, {}) == (0, 0)


def test_memory_weighted_takes_the_node_with_most_free_memory() -> None:
    nodes = cluster([[40, 40], [0, 60], [70, 70]])
    mw = MemoryWeighted(np.random.default_rng(0))
    # node 1 has 80 + 20 = 100 GiB free (node 0: 80); on it the GPU with most free
    assert mw.choose(WANT, nodes, 4, {}, {}) == (1, 0)
    full = cluster([[60, 60]])
    assert mw.choose(WANT, full, 4, {}, {}) is None


def test_kvspread_picks_the_extenders_best_score() -> None:
    nodes = cluster(
        [[40, 0, 0, 0], [48, 48, 0, 0], [20, 50, 60, 8]], pools=("language", "vision", "mixed")
    )
    vw = views(nodes)
    kv = Kvspread(np.random.default_rng(0))
    pick = kv.choose(WANT, nodes, 4, vw, {})
    assert pick is not None
    # recompute with the extender directly on the same states and shape distribution
    cfg = ScoringConfig()
    shapes = ShapeDistribution(cfg)
    pod = PodShape(
        gpus=1, mem_per_gpu_mib=32 * 1024.0, model=WANT.model, modality=WANT.modality, qos=WANT.qos
    )
    shapes.observe(pod)
    scores = score_nodes(pod, kv.node_states(nodes, 4, vw, {}), cfg, shapes.snapshot())
    best = max(s.score for s in scores)
    winners = {s.name for s in scores if s.score == best}
    assert nodes[pick[0]].name in winners
    chosen = next(s for s in scores if s.name == nodes[pick[0]].name)
    assert pick[1] == chosen.gpus_chosen[0]


def test_kvspread_filter_refuses_nodes_without_room() -> None:
    nodes = cluster([[60, 60], [70, 50]])
    kv = Kvspread(np.random.default_rng(0))
    assert kv.choose(WANT, nodes, 4, views(nodes), {}) is None


def test_kvspread_sees_full_slots_as_full_gpus() -> None:
    nodes = cluster([[0, 0]])
    states = Kvspread(np.random.default_rng(0)).node_states(nodes, 0, views(nodes), {})
    assert all(g.free_mib == 0 for g in states[0].gpus)


def test_unknown_policy() -> None:
    with pytest.raises(ValueError, match="unknown placement policy"):
        make_policy("best-effort", np.random.default_rng(0))
