"""Baseline scores on hand-computed states (the artifact's integer arithmetic)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.replay.cluster import Cluster, Pod
from simulator.replay.fragmentation import FragModel
from simulator.replay.policies import Replay, make_policy
from simulator.replay.policies.fgd import sigmoid_score
from simulator.replay.trace import NodeList
from simulator.replay.workload import TargetShapes


def _nodes() -> NodeList:
    # three 8-GPU G2-like nodes (96 cores, 384 GiB)
    return NodeList(
        path=Path("test"),
        names=("a", "b", "c"),
        cpu_milli=np.array([96000, 96000, 96000]),
        memory_mib=np.array([393216] * 3),
        gpus=np.array([8, 8, 8]),
        model_id=np.zeros(3, dtype=np.int64),
        models=("G2",),
    )


def _pod(cpu: int, milli: int, num: int, shape: int = 0) -> Pod:
    return Pod(0, cpu, 1024, num, milli if num else 0, 0, shape)


def _replay() -> Replay:
    cluster = Cluster(_nodes())
    targets = TargetShapes(
        cpu_milli=np.array([4000, 4000]),
        gpu_milli=np.array([500, 1000]),
        num_gpu=np.array([1, 1]),
        spec_id=np.zeros(2, dtype=np.int64),
        weight=np.array([0.5, 0.5]),
    )
    access = np.ones((1, 3), dtype=bool)
    frag = FragModel(targets, access, cluster.model_id)
    node_frag = frag.fragmentation(cluster.gpu_free, cluster.cpu_free, cluster.model_id)
    return Replay(cluster, frag, node_frag, access, np.random.default_rng(0), targets)


def _busy() -> Replay:
    """A replay where node a has one GPU at 700 used, node b 2 whole GPUs used, c is empty."""
    r = _replay()
    c = r.cluster
    c.place(0, np.array([3]), _pod(8000, 700, 1))
    c.place(1, np.array([0, 1]), _pod(24000, 1000, 2))
    for n in range(3):
        r.node_frag[n] = r.frag.fragmentation(
            c.gpu_free[n : n + 1], c.cpu_free[n : n + 1], c.model_id[n : n + 1]
        )[0]
    return r


ALL = np.array([0, 1, 2])


def test_gpupacking_bands() -> None:
    r = _busy()
    p = make_policy("gpupacking", r)
    share = p.score(_pod(4000, 200, 1), ALL)
    # a: shared GPU (300 free: 100 - 30 // 10 = 97); b: used node, 1 free GPU (50 - 1);
    # c: idle node (max(33 - 8, 8) = 25)
    assert share.tolist() == [97, 49, 25]
    assert p.score(_pod(4000, 0, 0), ALL).tolist() == [0, 0, 0]


def test_gpuclustering_bands() -> None:
    r = _busy()
    p = make_policy("gpuclustering", r)
    s = p.score(_pod(4000, 1000, 2), ALL)
    # b holds only 2-GPU pods: 75 + 25 * 2000 // 8000 = 81; a holds a shared pod: 0 + 25 *
    # 700 // 8000 = 2; c is idle: 25 + 0
    assert s.tolist() == [2, 81, 25]


def test_bestfit_and_dotproduct() -> None:
    r = _busy()
    pod = _pod(8000, 1000, 1)
    best = make_policy("bestfit", r).score(pod, ALL)
    # c: (1 - ((96000 - 8000)/128000 * 0.5 + (8000 - 1000)/8000 * 0.5)) * 100 = 21.875 -> 21
    assert best[2] == 21
    assert best[0] > best[2] and best[1] > best[2]
    dot = make_policy("dotproduct", r).score(pod, ALL)
    # c: 100 * (1 - (96/128 * 8/128 + 8000/8000 * 1000/8000) / 2) = 91.40625 -> 91
    assert dot[2] == 91


def test_fgd_prefers_the_gpu_that_removes_a_fragment() -> None:
    r = _busy()
    p = make_policy("fgd", r)
    pod = _pod(4000, 300, 1, shape=1)
    s = p.score(pod, ALL)
    # on node a the 300 milli GPU is a fragment for the 500 and 1000 shapes; filling it is
    # the only placement that lowers F, so a scores above 50 and takes GPU 3
    assert s[0] == s.max() and s[0] > 50
    assert p.choose_gpus(pod, 0).tolist() == [3]
    assert sigmoid_score(np.array([0.0, 1000.0, -1000.0])).tolist() == [50, 73, 26]


def test_random_gives_one_node_the_top_score() -> None:
    r = _replay()
    s = make_policy("random", r).score(_pod(1000, 500, 1), ALL)
    assert sorted(s.tolist()) == [0, 0, 100]


def test_unknown_policy() -> None:
    with pytest.raises(KeyError, match="known: random"):
        make_policy("nope", _replay())
