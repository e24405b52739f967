"""kvspread's own placement, through the extender's pure functions (never a copy of them).

Per pod, as kube-scheduler would drive the extender: the nodes that pass the scheduler's own
filters (CPU, host memory, GPU model) go through `extender.fit.fit_batch`, then
`extender.scoring.node_values` gives each node its weighted value (`score_batch`'s, before
normalisation), and `extender.scoring.finish_scores` normalises over the candidates and
rounds to the integer 0..10 that the extender returns. Ties are broken uniformly at random
(kube-scheduler's `selectHost`). The GPUs taken are the ones the extender chose.

The trace in extender terms: GPU "memory" is counted in milli-GPU (`GpuState(total_mib=1000,
allocated_mib=1000 - free)`), a sharing pod is `PodShape(gpus=1, mem_per_gpu_mib=gpu_milli)`,
a whole-GPU pod `PodShape(gpus=k)` (whole GPUs), CPU is tracked (`cpu_free`). The trace has no
signals (no streams, image share or latency), no model labels and no pools, so spread,
modality and QoS are the same on every node, and the load term, which reads measured memory
only (claims count in fit and fragmentation), is the same on every node too; the replay runs
the extender's default configuration. The target shape distribution is
the trace's own (the GPU shapes of `workload.target_shapes`), as FGD gets it. Node names reach
`finish_scores`, so the extender's stable node preference applies as in a deployment.

Modes:
- `kvspread`: the extender's integer 0..10 scores (what a deployment gets).
- `kvspread-unrounded`: the same values before rounding, to measure what the 0..10 scale costs.
- `kvspread-k8s`: kube-scheduler's default scoring added: NodeResourcesFit (LeastAllocated,
  CPU and memory, weight 1 each) and NodeResourcesBalancedAllocation (weight 1), each 0..100,
  plus the extender's score x (100 / 10) x its weight.

A node's value depends only on its state and the pod's shape here, so values are cached per
shape and recomputed for the nodes that changed; normalisation over the candidates is redone
for every pod, as the extender does.
"""

from __future__ import annotations

import numpy as np

from extender.batch import NodeTable
from extender.config import ScoringConfig
from extender.fit import fit_batch
from extender.model import GpuState, NodeState, PodShape
from extender.scoring import finish_scores, node_preference, node_values
from extender.shapes import Shape, Shapes
from simulator.kubescore import MAX_NODE_SCORE, Requested, balanced_allocation, least_allocated
from simulator.replay.cluster import Pod
from simulator.replay.policies.base import Replay
from simulator.replay.trace import MAX_GPUS_PER_NODE, MILLI

__all__ = [
    "KvspreadPolicy",
    "KvspreadUnroundedPolicy",
    "KvspreadK8sPolicy",
    "DEFAULT_EXTENDER_WEIGHT",
]

TIE_RANDOM = "random"
MAX_EXTENDER_PRIORITY = 10
DEFAULT_EXTENDER_WEIGHT = 5
"""Extender weight in the KubeSchedulerConfiguration `extenders[].weight` assumed by
`kvspread-k8s`: the extender's 0..10 is worth up to 500 points against the two default
plugins' 200, but one step between its best and second-best node is only 50, which the
defaults' preference for empty nodes outweighs (6.16 % unallocated against 4.55 % in the 10-seed replay; hence the
shipped profile disables those two score plugins, manifests/extender/)."""
NONZERO_MEMORY_MIB = 200.0
NONZERO_CPU_MILLI = 100.0


def _pod_shape(pod: Pod) -> PodShape:
    if pod.num_gpu == 0:
        return PodShape(gpus=0, cpu_milli=float(pod.cpu_milli))
    need = float(pod.gpu_milli) if pod.gpu_milli < MILLI else None
    return PodShape(gpus=pod.num_gpu, mem_per_gpu_mib=need, cpu_milli=float(pod.cpu_milli))


class KvspreadPolicy:
    """The extender's integer scores (see module docstring)."""

    name = "kvspread"
    tie_break = TIE_RANDOM
    rounded = True

    def __init__(self, replay: Replay, cfg: ScoringConfig | None = None) -> None:
        self.r = replay
        self.cfg = cfg if cfg is not None else ScoringConfig()
        t = replay.targets
        gpu = t.num_gpu > 0
        self.shapes = Shapes.of(
            [
                Shape(
                    gpus=int(k),
                    mem_per_gpu_mib=float(g) if g < MILLI else None,
                    cpu_milli=float(c),
                    p=float(p),
                )
                for k, g, c, p in zip(
                    t.num_gpu[gpu], t.gpu_milli[gpu], t.cpu_milli[gpu], t.weight[gpu], strict=True
                )
            ]
        )
        c = replay.cluster
        self._names = list(c.nodes.names)
        self._name_array = np.array(self._names, dtype=object)
        self._preferences = np.fromiter(map(node_preference, self._names), float, len(c))
        # The extender's own row store (extender.batch.NodeTable), one row per node, updated
        # when a node changes, exactly as the extender's node cache keeps it.
        self.table = NodeTable(width=MAX_GPUS_PER_NODE)
        for node in range(len(c)):
            self.table.set(self._state(node))
        self._cache: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self._shape_of: dict[int, PodShape] = {}

    def _state(self, node: int) -> NodeState:
        """The trace node as the extender sees it: GPU claims in milli-GPU, CPU tracked, no
        measured signals (streams, image share, latency unknown)."""
        c = self.r.cluster
        free = c.gpu_free[node, : c.n_gpu[node]].tolist()
        return NodeState(
            name=self._names[node],
            gpus=tuple(
                GpuState(total_mib=float(MILLI), allocated_mib=float(MILLI - f)) for f in free
            ),
            cpu_free_milli=float(c.cpu_free[node]),
        )

    def on_placed(self, node: int) -> None:
        """Engine hook: a pod was bound to `node`; refresh its row."""
        self.table.set(self._state(node))

    def _shape(self, pod: Pod) -> PodShape:
        shape = self._shape_of.get(pod.shape_id)
        if shape is None:
            shape = self._shape_of[pod.shape_id] = _pod_shape(pod)
        return shape

    def _entry(self, pod: Pod) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        entry = self._cache.get(pod.shape_id)
        if entry is None:
            n = len(self.r.cluster)
            entry = (
                np.zeros(n, dtype=bool),
                np.zeros(n),
                np.zeros((n, MAX_GPUS_PER_NODE), dtype=bool),
                np.full(n, -1, dtype=np.int64),
            )
            self._cache[pod.shape_id] = entry
        return entry

    def values(self, pod: Pod, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(fits, value) over `candidates`: the extender's filter and unrounded value."""
        shape = self._shape(pod)
        fits, value, chosen, stamp = self._entry(pod)
        c = self.r.cluster
        stale = candidates[stamp[candidates] != c.version[candidates]]
        if len(stale):
            batch, _ = self.table.take(self._name_array[stale].tolist())
            ok, _ = fit_batch(shape, batch, self.cfg, reasons=False)
            _, val, picked = node_values(shape, batch, self.cfg, self.shapes, fits=ok)
            fits[stale] = ok
            value[stale] = val
            chosen[stale] = picked[:, :MAX_GPUS_PER_NODE]
            stamp[stale] = c.version[stale]
        return fits[candidates], value[candidates]

    def extender_scores(self, pod: Pod, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(scaled float, integer 0..10) per candidate, as the extender returns them."""
        ok, value = self.values(pod, candidates)
        names = self._name_array[candidates]
        prefs = self._preferences[candidates]
        shape = self._shape(pod)
        scaled, score = finish_scores(value, ok, self.cfg, names, preferences=prefs, pod=shape)
        return np.where(ok, scaled, -np.inf), np.where(ok, score, -1)

    def score(self, pod: Pod, candidates: np.ndarray) -> np.ndarray:
        scaled, score = self.extender_scores(pod, candidates)
        return score.astype(np.float64) if self.rounded else scaled

    def choose_gpus(self, pod: Pod, node: int) -> np.ndarray:
        _, _, chosen, stamp = self._entry(pod)
        if stamp[node] != self.r.cluster.version[node]:
            self.values(pod, np.array([node]))
        return np.flatnonzero(chosen[node])


class KvspreadUnroundedPolicy(KvspreadPolicy):
    """The extender's normalised values before rounding to 0..10 (diagnostic)."""

    name = "kvspread-unrounded"
    rounded = False


class KvspreadK8sPolicy(KvspreadPolicy):
    """kube-scheduler's default scoring plus the extender at `weight` (see module docstring)."""

    name = "kvspread-k8s"

    def __init__(
        self,
        replay: Replay,
        cfg: ScoringConfig | None = None,
        weight: float = DEFAULT_EXTENDER_WEIGHT,
    ) -> None:
        super().__init__(replay, cfg)
        self.weight = weight

    def score(self, pod: Pod, candidates: np.ndarray) -> np.ndarray:
        _, ext = self.extender_scores(pod, candidates)
        c = self.r.cluster
        cpu_cap, mem_cap = c.cpu_capacity[candidates], c.mem_capacity[candidates]
        cpu_used = cpu_cap - c.cpu_free[candidates]
        mem_used = mem_cap - c.mem_free[candidates]
        cpu, mem = float(pod.cpu_milli), float(pod.memory_mib)
        # LeastAllocated counts a pod that requests nothing as its non-zero default
        fit = Requested(
            cpu_used + max(cpu, NONZERO_CPU_MILLI),
            mem_used + max(mem, NONZERO_MEMORY_MIB),
            cpu_cap,
            mem_cap,
        )
        plugins = least_allocated(fit) + balanced_allocation(
            Requested(cpu_used + cpu, mem_used + mem, cpu_cap, mem_cap)
        )
        total = plugins + ext * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY) * self.weight
        return np.where(ext >= 0, total, -np.inf).astype(np.float64)
