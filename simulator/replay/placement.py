"""The placement replay: one trace, one policy, one seed -> a timeline of the cluster.

Method (FGD paper, section 6, and its artifact): the 1213 GPU nodes of the openb node list
start empty; pods arrive in the order of `workload.arrival_sequence` and never leave. For each
pod the nodes where it fits (CPU, host memory, GPU model, GPU shares) are scored by the policy,
the best is taken and the policy chooses the GPUs.

Ties. Integer scores tie often, and how ties are broken decides much of the result. The FGD
artifact runs a patched kube-scheduler (`k8s.io/kubernetes => mental2008/kubernetes
v1.20.5-minor`) and renames the nodes with a random per-seed prefix (`rand.Perm`), sorted by
name: its published numbers are only reproduced when a tie goes to the first node in that
random per-seed order (`TIE_NODE_ORDER`), which consolidates load onto the same nodes. With
kube-scheduler's own rule, a uniformly random node among the best (`TIE_RANDOM`), FGD leaves
about twice as many GPUs unallocated (docs/simulator.md has the numbers). The baselines use
node order (faithfulness); the kvspread policies use random ties, as a real kube-scheduler
would; `tie_break` overrides either. A pod that fits nowhere fails and is not retried. After every pod, failed
or not, CPU-only or not, the replay records the *arrived* GPU demand (every pod's request,
counted when it arrives, whether it was placed or not), the *allocated* GPU milli, the
cluster's fragmentation (FGD's F summed over nodes) and its idle GPU milli.

`ReplayResult.allocation_columns` turns the timeline into the published
`analysis_allo_discrete.csv` row: column k (0..130) is the mean allocation ratio (%) over the
steps whose arrived demand rounds to k % of capacity (the neighbouring k-1..k+1 when none do),
each step's ratio rounded to 2 decimals first, as the artifact's analysis script does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from simulator.replay.cluster import Cluster, Pod, spec_access
from simulator.replay.fragmentation import FragModel
from simulator.replay.policies import Replay, make_policy
from simulator.replay.trace import MILLI, NodeList, PodList, load_nodes, load_pods
from simulator.replay.workload import TUNE_RATIO, TargetShapes, arrival_sequence, target_shapes

__all__ = [
    "ARRIVED_LEVELS",
    "TIE_NODE_ORDER",
    "TIE_RANDOM",
    "ReplayResult",
    "InvariantError",
    "run_replay",
    "discretise",
    "load_trace",
]

ARRIVED_LEVELS = np.arange(0, 131)
TIE_NODE_ORDER = "node-order"
TIE_RANDOM = "random"


class InvariantError(AssertionError):
    """The cluster reached an impossible state (a bug, never bad input)."""


@dataclass(frozen=True)
class ReplayResult:
    """Timeline of one replay (one entry per arrived pod) and its summary."""

    trace: str
    policy: str
    seed: int
    total_gpus: int
    arrived_milli: np.ndarray  # int64, cumulative GPU demand that has arrived
    used_milli: np.ndarray  # int64, GPU milli allocated
    frag_milli: np.ndarray  # float64, sum of FGD fragmentation over nodes
    idle_milli: np.ndarray  # int64, free GPU milli
    failed: int
    elapsed_s: float

    @property
    def pods(self) -> int:
        return len(self.arrived_milli)

    def allocation_columns(self) -> np.ndarray:
        """Allocation ratio (%) at arrived demand 0..130 % (NaN where no step is near)."""
        alloc = np.round(self.used_milli / self.total_gpus / 10.0, 2)
        return discretise(self.arrived_milli, self.total_gpus, alloc)

    def frag_ratio_columns(self) -> np.ndarray:
        """Fragmentation ratio (% of idle GPU milli) at arrived demand 0..130 %."""
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.round(100.0 * self.frag_milli / self.idle_milli, 2)
        return discretise(self.arrived_milli, self.total_gpus, ratio, round_to=None)


def discretise(
    arrived_milli: np.ndarray, total_gpus: int, values: np.ndarray, round_to: int | None = 2
) -> np.ndarray:
    """Mean of `values` over steps whose arrived % rounds to each level 0..130 (see module)."""
    level = np.round(arrived_milli / total_gpus / 10.0)  # round half to even, like Python
    out = np.full(len(ARRIVED_LEVELS), np.nan)
    for k in ARRIVED_LEVELS:
        sel = level == k
        if not sel.any():
            sel = (level >= k - 1) & (level <= k + 1)
            if not sel.any():
                continue
        v = values[sel]
        v = v[np.isfinite(v)]
        if len(v):
            out[k] = v.mean() if round_to is None else round(float(v.mean()), round_to)
    return out


@dataclass(frozen=True)
class Trace:
    """A loaded trace with everything a replay derives from it once."""

    name: str
    nodes: NodeList
    pods: PodList
    pod_objects: tuple[Pod, ...]
    access: np.ndarray
    frag: FragModel
    targets: TargetShapes


@lru_cache(maxsize=8)
def load_trace(trace: str, node_list: str | None = None) -> Trace:
    """Load a pod list (bundled name or path) with the node list; cached per process."""
    nodes = load_nodes(Path(node_list) if node_list else None)
    pods = load_pods(trace)
    keys = np.stack([pods.cpu_milli, pods.gpu_milli, pods.num_gpu, pods.spec_id], axis=1)
    _, shape_id = np.unique(keys, axis=0, return_inverse=True)
    shape_id = shape_id.reshape(-1)
    objects = tuple(
        Pod(i, int(c), int(m), int(n), int(g), int(s), int(h))
        for i, (c, m, n, g, s, h) in enumerate(
            zip(
                pods.cpu_milli.tolist(),
                pods.memory_mib.tolist(),
                pods.num_gpu.tolist(),
                pods.gpu_milli.tolist(),
                pods.spec_id.tolist(),
                shape_id.tolist(),
                strict=True,
            )
        )
    )
    access = spec_access(nodes, pods)
    targets = target_shapes(pods)
    frag = FragModel(targets, access, nodes.model_id)
    return Trace(pods.name, nodes, pods, objects, access, frag, targets)


def check_invariants(cluster: Cluster, arrived: int) -> None:
    """Raise InvariantError unless every node is within its capacities."""
    if (cluster.gpu_free < 0).any() or (cluster.gpu_free > MILLI).any():
        raise InvariantError("a GPU is allocated beyond 1000 milli or below 0")
    if (cluster.cpu_free < 0).any() or (cluster.mem_free < 0).any():
        raise InvariantError("a node is allocated beyond its CPU or memory capacity")
    used = cluster.capacity_gpu_milli - int(cluster.gpu_free.sum())
    if used != cluster.used_gpu_milli or used > arrived:
        raise InvariantError(f"allocated {used} milli-GPU but only {arrived} arrived")


def run_replay(
    trace: Trace,
    policy: str,
    seed: int,
    *,
    stop_at_percent: float | None = None,
    invariants: bool = False,
    tie_break: str | None = None,
    policy_factory: Callable[[Replay], object] | None = None,
) -> ReplayResult:
    """Replay `trace` under `policy` with `seed` (see module docstring).

    `stop_at_percent` ends the replay once the arrived demand passes that % of capacity (the
    CI runs stop just past 100 %); `invariants` checks the cluster after every pod (slow);
    `tie_break` is `TIE_NODE_ORDER`, `TIE_RANDOM` or None for the policy's own rule.
    """
    rng = np.random.default_rng(seed)
    cluster = Cluster(trace.nodes)
    priority = rng.permutation(len(cluster))  # the artifact's random node-name prefixes
    order = arrival_sequence(trace.pods, cluster.capacity_gpu_milli, rng, TUNE_RATIO)
    frag = trace.frag
    node_frag = frag.fragmentation(cluster.gpu_free, cluster.cpu_free, cluster.model_id)
    replay = Replay(cluster, frag, node_frag, trace.access, rng, trace.targets)
    chosen = policy_factory(replay) if policy_factory else make_policy(policy, replay)
    rule = tie_break or getattr(chosen, "tie_break", TIE_NODE_ORDER)
    if rule not in (TIE_NODE_ORDER, TIE_RANDOM):
        raise ValueError(f"tie_break must be {TIE_NODE_ORDER!r} or {TIE_RANDOM!r}, got {rule!r}")
    by_order = rule == TIE_NODE_ORDER
    on_placed = getattr(chosen, "on_placed", None)
    limit = (
        np.inf if stop_at_percent is None else stop_at_percent / 100.0 * cluster.capacity_gpu_milli
    )
    n = len(order)
    arrived_a = np.zeros(n, dtype=np.int64)
    used_a = np.zeros(n, dtype=np.int64)
    frag_a = np.zeros(n, dtype=np.float64)
    arrived = 0
    failed = 0
    steps = 0
    empty = np.zeros(0, dtype=np.int64)
    start = time.perf_counter()
    for idx in order.tolist():
        if arrived > limit:
            break
        pod = trace.pod_objects[idx]
        arrived += pod.total_gpu_milli
        candidates = cluster.feasible(pod, trace.access)
        scores = chosen.score(pod, candidates) if len(candidates) else None  # type: ignore[attr-defined]
        if scores is not None and np.isfinite(top := scores.max()):
            best = np.flatnonzero(scores == top)
            if len(best) == 1:
                pick = best[0]
            elif by_order:
                pick = best[np.argmin(priority[candidates[best]])]
            else:
                pick = best[rng.integers(len(best))]
            node = int(candidates[pick])
            gpus = chosen.choose_gpus(pod, node) if pod.num_gpu else empty  # type: ignore[attr-defined]
            cluster.place(node, gpus, pod)
            if on_placed is not None:
                on_placed(node)
            node_frag[node] = frag.fragmentation(
                cluster.gpu_free[node : node + 1],
                cluster.cpu_free[node : node + 1],
                cluster.model_id[node : node + 1],
            )[0]
        else:
            failed += 1
        if invariants:
            check_invariants(cluster, arrived)
        arrived_a[steps] = arrived
        used_a[steps] = cluster.used_gpu_milli
        frag_a[steps] = node_frag.sum()
        steps += 1
    elapsed = time.perf_counter() - start
    used = used_a[:steps]
    return ReplayResult(
        trace=trace.name,
        policy=policy,
        seed=seed,
        total_gpus=cluster.capacity_gpu_milli // MILLI,
        arrived_milli=arrived_a[:steps],
        used_milli=used,
        frag_milli=frag_a[:steps],
        idle_milli=cluster.capacity_gpu_milli - used,
        failed=failed,
        elapsed_s=elapsed,
    )
