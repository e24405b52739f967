"""What a placement policy sees and must answer, and the GPU-selection rules it can reuse.

A policy scores the feasible nodes for one pod (higher is better; the engine picks the best,
breaking ties uniformly at random as kube-scheduler's `selectHost` does) and then chooses the
GPUs on the winning node. Policies are created fresh for every replay, so they may cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from simulator.replay.cluster import Cluster, Pod
from simulator.replay.fragmentation import FragModel
from simulator.replay.trace import MILLI
from simulator.replay.workload import TargetShapes

__all__ = [
    "Replay",
    "Policy",
    "best_fit_gpu",
    "random_fit_gpu",
    "lowest_free_gpus",
]


@dataclass
class Replay:
    """The shared state of one replay that policies read (never write, except caches)."""

    cluster: Cluster
    frag: FragModel
    node_frag: np.ndarray  # F(n) of each node's current state, kept current by the engine
    access: np.ndarray  # [spec, node] GPU-model access
    rng: np.random.Generator
    targets: TargetShapes  # FGD's target workload (what expected fragmentation averages)


class Policy(Protocol):
    """One placement policy for one replay."""

    name: str

    def score(self, pod: Pod, candidates: np.ndarray) -> np.ndarray:
        """Scores of `candidates` (node indices, non-empty), higher is better; -inf marks a
        node the policy itself filters out."""
        ...

    def choose_gpus(self, pod: Pod, node: int) -> np.ndarray:
        """GPU indices on `node` for a GPU pod (the pod fits there)."""
        ...


def lowest_free_gpus(gpu_free_row: np.ndarray, count: int) -> np.ndarray:
    """Whole-GPU pods: the `count` lowest-index fully free GPUs (the artifact's
    AllocateExclusiveGpuId)."""
    return np.flatnonzero(gpu_free_row == MILLI)[:count]


def best_fit_gpu(gpu_free_row: np.ndarray, pod: Pod) -> np.ndarray:
    """Shared pods: the GPU with the least free share that still fits (first on ties);
    whole-GPU pods: `lowest_free_gpus`."""
    if not pod.is_share:
        return lowest_free_gpus(gpu_free_row, pod.num_gpu)
    fits = gpu_free_row >= pod.gpu_milli
    masked = np.where(fits, gpu_free_row, np.iinfo(np.int64).max)
    return np.array([int(np.argmin(masked))])


def random_fit_gpu(gpu_free_row: np.ndarray, pod: Pod, rng: np.random.Generator) -> np.ndarray:
    """Shared pods: a uniformly random GPU that fits; whole-GPU pods: `lowest_free_gpus`."""
    if not pod.is_share:
        return lowest_free_gpus(gpu_free_row, pod.num_gpu)
    fits = np.flatnonzero(gpu_free_row >= pod.gpu_milli)
    return np.array([int(fits[rng.integers(len(fits))])])
