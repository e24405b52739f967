"""Mutable cluster state of one replay, as numpy arrays (one row per node).

Per node: free milli-GPU of each GPU (`gpu_free`, padded with 0 beyond the node's GPU count so
that a padded slot never fits a pod and adds nothing to any sum), free CPU milli-cores, free
host memory MiB, GPU model, and per-"affinity" pod counts (shared GPU, 1..8 whole GPUs) that
GpuClustering reads. Every change bumps the node's `version`, which lets policies cache
per-node scores and recompute only the nodes that changed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.replay.trace import MAX_GPUS_PER_NODE, MILLI, NodeList, PodList

__all__ = ["Cluster", "Pod", "spec_access"]


@dataclass(frozen=True)
class Pod:
    """One arriving pod: requests and its scoring-shape id (same id = same scores)."""

    index: int  # row in the pod list
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU; 0 for CPU-only pods
    spec_id: int
    shape_id: int

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def is_share(self) -> bool:
        """A GPU-sharing pod: one GPU, less than all of it."""
        return self.num_gpu == 1 and self.gpu_milli < MILLI

    @property
    def affinity(self) -> int:
        """GpuClustering's tag: -1 CPU-only, 0 shared GPU, k for k whole GPUs."""
        if self.num_gpu == 0:
            return -1
        return 0 if self.is_share else self.num_gpu


def spec_access(nodes: NodeList, pods: PodList) -> np.ndarray:
    """Bool matrix [spec, node]: may a pod with this gpu_spec use this node's GPU model."""
    access = np.ones((len(pods.specs), len(nodes)), dtype=bool)
    for sid, spec in enumerate(pods.specs):
        if spec:
            allowed = np.array([m in spec for m in nodes.models], dtype=bool)
            access[sid] = allowed[nodes.model_id]
    return access


class Cluster:
    """The nodes' free resources; `place` is the only mutation."""

    def __init__(self, nodes: NodeList) -> None:
        n = len(nodes)
        self.nodes = nodes
        self.n_gpu = nodes.gpus.copy()
        self.model_id = nodes.model_id.copy()
        self.cpu_capacity = nodes.cpu_milli.copy()
        self.mem_capacity = nodes.memory_mib.copy()
        slots = np.arange(MAX_GPUS_PER_NODE)[None, :]
        self.gpu_free = np.where(slots < self.n_gpu[:, None], MILLI, 0).astype(np.int64)
        self.cpu_free = self.cpu_capacity.copy()
        self.mem_free = self.mem_capacity.copy()
        self.affinity_count = np.zeros((n, MAX_GPUS_PER_NODE + 1), dtype=np.int64)
        self.pod_count = np.zeros(n, dtype=np.int64)
        self.version = np.zeros(n, dtype=np.int64)
        self.capacity_gpu_milli = int(self.n_gpu.sum()) * MILLI
        self.used_gpu_milli = 0
        self._clock = 0

    def __len__(self) -> int:
        return len(self.n_gpu)

    def feasible(self, pod: Pod, access: np.ndarray) -> np.ndarray:
        """Indices of nodes where the pod fits: CPU, memory, GPU model and GPU shares."""
        ok = (self.cpu_free >= pod.cpu_milli) & (self.mem_free >= pod.memory_mib)
        if pod.num_gpu > 0:
            ok &= access[pod.spec_id]
            ok &= (self.gpu_free >= pod.gpu_milli).sum(axis=1) >= pod.num_gpu
        return np.flatnonzero(ok)

    def place(self, node: int, gpus: np.ndarray, pod: Pod) -> None:
        """Bind `pod` to `node`, taking `pod.gpu_milli` from each GPU in `gpus`."""
        if len(gpus) != pod.num_gpu:
            raise ValueError(f"pod needs {pod.num_gpu} GPU(s), {len(gpus)} chosen")
        if self.cpu_free[node] < pod.cpu_milli or self.mem_free[node] < pod.memory_mib:
            raise ValueError(f"pod does not fit node {node} (CPU or memory)")
        if len(gpus) and (self.gpu_free[node, gpus] < pod.gpu_milli).any():
            raise ValueError(f"pod does not fit GPUs {list(gpus)} of node {node}")
        self.cpu_free[node] -= pod.cpu_milli
        self.mem_free[node] -= pod.memory_mib
        if len(gpus):
            self.gpu_free[node, gpus] -= pod.gpu_milli
            self.used_gpu_milli += pod.total_gpu_milli
            self.affinity_count[node, pod.affinity] += 1
        self.pod_count[node] += 1
        self._clock += 1
        self.version[node] = self._clock
