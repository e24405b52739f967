"""`kube-default`: kube-scheduler's default profile scoring a GPU inference pod.

What a cluster without kvspread does: the filter is resource fit on `nvidia.com/gpu`
(a free time-slicing slot; for a tensor-parallel pod asking for k GPUs, k free whole
GPUs; GPU memory is invisible to it), and the score plugins of the
default profile that can tell nodes apart here, at their default weights:

- NodeResourcesFit, strategy LeastAllocated (weight 1), over CPU and memory: the mean of
  (allocatable - requested) x 100 / allocatable, the incoming pod included. Extended
  resources such as `nvidia.com/gpu` are not scored by default.
- NodeResourcesBalancedAllocation (weight 1): (1 - std of the CPU and memory request
  fractions) x 100. These two come from `simulator.kubescore`, shared with the replay.
- PodTopologySpread (weight 2) with the system default constraints (hostname maxSkew 3,
  zone maxSkew 5, ScheduleAnyway; the simulated nodes carry no zone label, so only the
  hostname one applies; a service's pods are those serving its model): raw = its pods on
  the node x log(nodes + 2)
  + (maxSkew - 1), normalised as 100 x (max + min - raw) / max.
- ImageLocality (weight 1): the serving image (`IMAGE_MB`) counts once a node has run any
  engine; 100 x clamp((size x spread - 23 MB) / (1000 MB - 23 MB)), spread = share of
  nodes holding it.

Pod and node CPU/memory sizes are assumptions of this simulator (`POD_CPU` ...): every
serving pod and every other tenant's pod requests them per GPU slot it takes (a TP-4
pod requests 4 x POD_CPU). Nothing here sees NVLink: kube-scheduler scores no topology,
and the device plugin picks the GPUs inside the node.
TaintToleration, NodeAffinity and InterPodAffinity score every node alike here and are
left out. The highest total wins; ties are broken at random, as kube-scheduler does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from simulator.kubescore import Requested, balanced_allocation, least_allocated
from simulator.serving.cluster import Node, device_plugin_gpus, resource_fit

if TYPE_CHECKING:
    from simulator.serving.placement import BoundPod, ClusterSnapshot, Want

__all__ = ["KubeDefault", "scores", "POD_CPU", "POD_MEMORY_GIB", "NODE_CPU", "NODE_MEMORY_GIB"]

POD_CPU = 8.0  # vCPU per model instance (assumption: a vLLM pod's usual request)
POD_MEMORY_GIB = 64.0  # host memory per model instance (assumption)
NODE_CPU = 96.0  # allocatable vCPU of a GPU node (an 8-GPU A100 VM has 96)
NODE_MEMORY_GIB = 1024.0  # allocatable host memory of a GPU node (assumption)
IMAGE_MB = 9000.0  # a vLLM OpenAI-server image (about 9 GB uncompressed)
MAX_SKEW_HOSTNAME = 3
WEIGHTS = {"fit": 1, "balanced": 1, "spread": 2, "image": 1}
MIN_IMAGE_MB, MAX_IMAGE_MB = 23.0, 1000.0  # ImageLocality thresholds (one container)


class KubeDefault:
    """kube-scheduler's default score plugins for one GPU pod (module docstring)."""

    name = "kube-default"

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def choose(self, want: Want, seen: ClusterSnapshot) -> tuple[int, int] | None:
        feasible, total = scores(seen.nodes, seen.slots, seen.bound, want.model, want.gpus)
        if not feasible:
            return None
        best = np.flatnonzero(total == total.max())
        node = feasible[int(best[int(self._rng.integers(len(best)))])]
        g = device_plugin_gpus(node, want.gpus, seen.slots)
        return None if g is None else (node.index, g[0].index)


def scores(
    nodes: list[Node],
    slots: int,
    bound: Mapping[int, list[BoundPod]],
    model: str,
    gpus: int = 1,
) -> tuple[list[Node], np.ndarray]:
    """The feasible nodes and their total default-profile scores for a pod asking for
    `gpus` `nvidia.com/gpu` (its CPU and memory requests scale with them)."""
    feasible = [n for n in nodes if resource_fit(n, slots, gpus)]
    if not feasible:
        return [], np.empty(0)
    taken = np.array([sum(len(g.occupants) for g in n.gpus) for n in feasible], dtype=float)
    k = max(1, gpus)
    requested = Requested(
        (taken + k) * POD_CPU, (taken + k) * POD_MEMORY_GIB, NODE_CPU, NODE_MEMORY_GIB
    )
    fit = least_allocated(requested)
    balanced = balanced_allocation(requested)
    same = np.array(
        [sum(1 for p in bound.get(n.index, []) if p.model == model) for n in feasible],
        dtype=float,
    )
    raw = same * math.log(len(nodes) + 2) + (MAX_SKEW_HOSTNAME - 1)
    hi, lo = raw.max(), raw.min()
    spread = np.full(len(feasible), 100.0) if hi <= 0 else 100.0 * (hi + lo - raw) / hi
    spread = spread.astype(np.int64)
    has_image = np.array([1.0 if bound.get(n.index) else 0.0 for n in nodes])
    share = has_image.mean() if len(nodes) else 0.0
    with_image = np.array([1.0 if bound.get(n.index) else 0.0 for n in feasible])
    size = IMAGE_MB * share * with_image
    image = np.clip((size - MIN_IMAGE_MB) / (MAX_IMAGE_MB - MIN_IMAGE_MB), 0.0, 1.0) * 100
    image = image.astype(np.int64)
    total = (
        WEIGHTS["fit"] * fit
        + WEIGHTS["balanced"] * balanced
        + WEIGHTS["spread"] * spread
        + WEIGHTS["image"] * image
    )
    return feasible, total
