"""The FGD paper's baseline policies, reimplemented from their published definitions.

Each score is the integer 0..100 that the artifact's kube-scheduler plugin returns (Go integer
arithmetic and float-to-int truncation reproduced), because the truncation creates ties and the
ties are broken by node order (see `simulator.replay.placement`): changing the rounding changes the
result. GPU choice on the chosen
node: best fit (tightest GPU that fits) except Random, which picks a random fitting GPU.

Constants from the artifact: MaxSpecCpu = 128000 milli-cores, MaxSpecGpu = 8000 milli-GPU
(an 8-GPU node), MaxNodeScore = 100.
"""

from __future__ import annotations

import numpy as np

from simulator.replay.cluster import Pod
from simulator.replay.policies.base import Replay, best_fit_gpu, random_fit_gpu
from simulator.replay.trace import MILLI

__all__ = [
    "RandomPolicy",
    "DotProductPolicy",
    "GpuClusteringPolicy",
    "GpuPackingPolicy",
    "BestFitPolicy",
]

MAX_SPEC_CPU = 128000.0
MAX_SPEC_GPU = 8000
MAX_NODE_SCORE = 100


class RandomPolicy:
    """Random: a uniformly random feasible node, a random fitting GPU."""

    name = "random"

    def __init__(self, replay: Replay) -> None:
        self.r = replay

    def score(self, pod: Pod, candidates: np.ndarray) -> np.ndarray:
        # The artifact's PreScore draws one feasible node; it alone gets MaxNodeScore.
        scores = np.zeros(len(candidates), dtype=np.int64)
        scores[self.r.rng.integers(len(candidates))] = MAX_NODE_SCORE
        return scores

    def choose_gpus(self, pod: Pod, node: int) -> np.ndarray:
        return random_fit_gpu(self.r.cluster.gpu_free[node], pod, self.r.rng)


class _BestFitGpuMixin:
    r: Replay

    def choose_gpus(self, pod: Pod, node: int) -> np.ndarray:
        return best_fit_gpu(self.r.cluster.gpu_free[node], pod)


class DotProductPolicy(_BestFitGpuMixin):
    """DotProduct (Tetris; the artifact's "merge" dimensions, "max" normalisation): the dot
    product of the node's free (CPU, total GPU) and the pod's request, each divided by the
    maximum node spec, averaged over the 2 dimensions; score = int(100 * (1 - that))."""

    name = "dotproduct"

    def __init__(self, replay: Replay) -> None:
        self.r = replay

    def score(self, pod: Pod, candidates: np.ndarray) -> np.ndarray:
        c = self.r.cluster
        node_cpu = c.cpu_free[candidates] / MAX_SPEC_CPU
        node_gpu = c.gpu_free[candidates].sum(axis=1) / float(MAX_SPEC_GPU)
        dot = node_cpu * (pod.cpu_milli / MAX_SPEC_CPU) + node_gpu * (
            pod.total_gpu_milli / float(MAX_SPEC_GPU)
        )
        score: np.ndarray = (100.0 * (1.0 - dot / 2.0)).astype(np.int64)
        return score


class GpuClusteringPolicy(_BestFitGpuMixin):
    """GpuClustering: prefer nodes already running pods of the same GPU "affinity" (shared GPU,
    or k whole GPUs): (75,100] node with only that affinity, (50,75] that affinity among
    others, (25,50] a node with no GPU pods, [0,25] otherwise; within a band, fuller nodes
    score higher. CPU-only pods score 0 everywhere."""

    name = "gpuclustering"

    def __init__(self, replay: Replay) -> None:
        self.r = replay

    def score(self, pod: Pod, candidates: np.ndarray) -> np.ndarray:
        if pod.affinity < 0:
            return np.zeros(len(candidates), dtype=np.int64)
        c = self.r.cluster
        left = c.gpu_free[candidates].sum(axis=1)
        base = (MAX_NODE_SCORE // 4) * (MAX_SPEC_GPU - left) // MAX_SPEC_GPU
        counts = c.affinity_count[candidates]
        kinds = (counts > 0).sum(axis=1)
        same = counts[:, pod.affinity] > 0
        band = np.where(
            same,
            np.where(kinds == 1, MAX_NODE_SCORE * 3 // 4, MAX_NODE_SCORE * 2 // 4),
            np.where(kinds == 0, MAX_NODE_SCORE // 4, 0),
        )
        score: np.ndarray = base + band
        return score


class GpuPackingPolicy(_BestFitGpuMixin):
    """GpuPacking: first fill partly used GPUs (score 100 - free share of the GPUs used / 10,
    at least 50), then free GPUs on used nodes (50 - GPUs taken, at least 33), then idle nodes
    (33 - GPU count). CPU-only pods score 0 everywhere."""

    name = "gpupacking"

    def __init__(self, replay: Replay) -> None:
        self.r = replay

    def score(self, pod: Pod, candidates: np.ndarray) -> np.ndarray:
        if pod.num_gpu == 0:
            return np.zeros(len(candidates), dtype=np.int64)
        c = self.r.cluster
        free = np.sort(c.gpu_free[candidates], axis=1)  # ascending: tightest GPUs first
        fits = free >= pod.gpu_milli
        chosen = fits & (np.cumsum(fits, axis=1) <= pod.num_gpu)
        full_used = (chosen & (free == MILLI)).sum(axis=1)
        share_sum = np.where(chosen, free * 100 // MILLI, 0).sum(axis=1)
        case1 = np.maximum(MAX_NODE_SCORE - share_sum // 10, MAX_NODE_SCORE // 2)
        case2 = np.maximum(MAX_NODE_SCORE // 2 - full_used, MAX_NODE_SCORE // 3)
        fully_free = (c.gpu_free[candidates] == MILLI).sum(axis=1)
        case3 = np.maximum(MAX_NODE_SCORE // 3 - fully_free, fully_free)
        idle = fully_free == c.n_gpu[candidates]
        score: np.ndarray = np.where(idle, case3, np.where(full_used > 0, case2, case1))
        return score


class BestFitPolicy(_BestFitGpuMixin):
    """BestFit: the least leftover after placement, sum over (CPU, total GPU) of
    (free - request) / max spec * 0.5, as int(100 * (1 - that)). (The artifact then min-max
    normalises the integer scores, which keeps their order and ties.)"""

    name = "bestfit"

    def __init__(self, replay: Replay) -> None:
        self.r = replay

    def score(self, pod: Pod, candidates: np.ndarray) -> np.ndarray:
        c = self.r.cluster
        cpu_left = (c.cpu_free[candidates] - pod.cpu_milli) / MAX_SPEC_CPU * 0.5
        gpu_left = (
            (c.gpu_free[candidates].sum(axis=1) - pod.total_gpu_milli) / float(MAX_SPEC_GPU) * 0.5
        )
        score: np.ndarray = ((1.0 - (cpu_left + gpu_left)) * 100.0).astype(np.int64)
        return score
