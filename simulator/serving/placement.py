"""Where a new model instance goes: the three placement policies under comparison.

- `round-robin`: nodes in turn; on the node, the GPU with the fewest pods. Counts only
  time-slicing slots (`nvidia.com/gpu` replicas), not memory: the behaviour of a default
  scheduler with a time-sliced device plugin, which does not enforce GPU memory.
- `memory-weighted`: the node with the most free GPU memory (sum over its GPUs of
  free_g = total - max(used, allocated)) among nodes with a GPU that fits the request;
  on it, the GPU with the most free memory.
- `kvspread`: the extender's own filter (`extender.fit.check_fit`) and prioritize
  (`extender.scoring.score_nodes`) on NodeStates built from the simulated collector's last
  published signals and the scheduler's claims; the best 0..10 score wins, ties broken
  at random as kube-scheduler does; the GPU is the one the scoring chose.

Every policy also respects time-slicing slots (kube-scheduler's own resource fit runs
before any extender).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from extender.config import ScoringConfig
from extender.fit import check_fit
from extender.model import GpuState, NodeState, PodShape
from extender.scoring import score_nodes
from extender.shapes import ShapeDistribution
from simulator.serving.cluster import Gpu, Node

__all__ = [
    "POLICIES",
    "NodeView",
    "PlacementPolicy",
    "RoundRobin",
    "MemoryWeighted",
    "Kvspread",
    "make_policy",
]

POLICIES = ("round-robin", "memory-weighted", "kvspread")


@dataclass(frozen=True)
class NodeView:
    """What the collector last published for one node (DESIGN.md section 3).

    `used_mib` per GPU, in-flight `streams`, `image_token_share` of recent tokens and
    the node's `p95_s` request latency (None when not measured: nothing completed).
    """

    used_mib: tuple[float, ...]
    streams: int
    image_token_share: float | None
    p95_s: float | None = None


@dataclass(frozen=True)
class Want:
    """The pod to place: its service's model, request kind, QoS and memory request."""

    model: str
    modality: str
    qos: str
    request_gib: float


class PlacementPolicy(Protocol):
    name: str

    def choose(
        self,
        want: Want,
        nodes: list[Node],
        slots: int,
        views: Mapping[int, NodeView],
        replicas: Mapping[int, Mapping[str, int]],
    ) -> tuple[int, int] | None:
        """(node index, GPU index) or None when the pod is unschedulable now."""
        ...


def _has_slot(g: Gpu, slots: int) -> bool:
    return len(g.occupants) < slots


class RoundRobin:
    name = "round-robin"

    def __init__(self, rng: np.random.Generator) -> None:
        self._next = 0

    def choose(self, want, nodes, slots, views, replicas):  # type: ignore[no-untyped-def]
        n = len(nodes)
        for i in range(n):
            node = nodes[(self._next + i) % n]
            open_gpus = [g for g in node.gpus if _has_slot(g, slots)]
            if open_gpus:
                g = min(open_gpus, key=lambda x: (len(x.occupants), x.index))
                self._next = (node.index + 1) % n
                return node.index, g.index
        return None


class MemoryWeighted:
    name = "memory-weighted"

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def choose(self, want, nodes, slots, views, replicas):  # type: ignore[no-untyped-def]
        best: list[tuple[int, int]] = []
        best_free = -1.0
        for node in nodes:
            fits = [g for g in node.gpus if _has_slot(g, slots) and g.free_gib >= want.request_gib]
            if not fits:
                continue
            total = sum(g.free_gib for g in node.gpus)
            g = max(fits, key=lambda x: (x.free_gib, -x.index))
            if total > best_free + 1e-9:
                best, best_free = [(node.index, g.index)], total
            elif abs(total - best_free) <= 1e-9:
                best.append((node.index, g.index))
        if not best:
            return None
        return best[int(self._rng.integers(len(best)))]


class Kvspread:
    """Placement through the extender's pure filter and scoring functions."""

    name = "kvspread"

    def __init__(self, rng: np.random.Generator, cfg: ScoringConfig | None = None) -> None:
        self._rng = rng
        self.cfg = cfg or ScoringConfig()
        self.shapes = ShapeDistribution(self.cfg)
        self.last_scores: list[tuple[str, int]] = []

    def node_states(
        self,
        nodes: list[Node],
        slots: int,
        views: Mapping[int, NodeView],
        replicas: Mapping[int, Mapping[str, int]],
    ) -> list[NodeState]:
        """NodeStates as the extender's cache would build them from signals and pods.

        A GPU whose time-slicing slots are all taken cannot take a pod whatever its
        memory: it is shown fully allocated.
        """
        out: list[NodeState] = []
        for node in nodes:
            view = views.get(node.index)
            if view is None:
                out.append(
                    NodeState(
                        name=node.name,
                        signals="missing",
                        pool=node.pool,
                        nvlink=node.nvlink,
                        model_replicas=dict(replicas.get(node.index, {})),
                    )
                )
                continue
            gpus = []
            for g, used in zip(node.gpus, view.used_mib, strict=True):
                total = g.total_gib * 1024.0
                alloc = g.allocated_gib * 1024.0
                if not _has_slot(g, slots):
                    alloc = total
                gpus.append(GpuState(total_mib=total, used_mib=used, allocated_mib=alloc))
            out.append(
                NodeState(
                    name=node.name,
                    gpus=tuple(gpus),
                    streams=view.streams,
                    image_token_share=view.image_token_share,
                    p95_s=view.p95_s,
                    pool=node.pool,
                    nvlink=node.nvlink,
                    model_replicas=dict(replicas.get(node.index, {})),
                )
            )
        return out

    def choose(self, want, nodes, slots, views, replicas):  # type: ignore[no-untyped-def]
        pod = PodShape(
            gpus=1,
            mem_per_gpu_mib=want.request_gib * 1024.0,
            model=want.model,
            modality=want.modality,
            qos=want.qos,
        )
        self.shapes.observe(pod)
        states = self.node_states(nodes, slots, views, replicas)
        passing = [s for s in states if check_fit(pod, s, self.cfg).fits]
        # kube-scheduler's own resource fit: a node needs a free slot somewhere
        passing = [
            s
            for s in passing
            if any(_has_slot(g, slots) for g in nodes[int(s.name.rsplit("-", 1)[1])].gpus)
        ]
        if not passing:
            return None
        scores = score_nodes(pod, passing, self.cfg, self.shapes.snapshot())
        top = max(s.score for s in scores if s.fits) if any(s.fits for s in scores) else None
        if top is None:
            return None
        best = [s for s in scores if s.fits and s.score == top]
        pick = best[int(self._rng.integers(len(best)))]
        self.last_scores = [(s.name, s.score) for s in scores]
        ni = int(pick.name.rsplit("-", 1)[1])
        node = nodes[ni]
        if pick.gpus_chosen:
            gi = pick.gpus_chosen[0]
        else:  # signals missing: best fit by the scheduler's own ledger
            fits = [g for g in node.gpus if _has_slot(g, slots) and g.free_gib >= want.request_gib]
            if not fits:
                return None
            gi = min(fits, key=lambda x: (x.free_gib, x.index)).index
        return ni, gi


def make_policy(
    name: str, rng: np.random.Generator, cfg: ScoringConfig | None = None
) -> PlacementPolicy:
    """The policy called `name` (one of POLICIES)."""
    if name == "round-robin":
        return RoundRobin(rng)
    if name == "memory-weighted":
        return MemoryWeighted(rng)
    if name == "kvspread":
        return Kvspread(rng, cfg)
    raise ValueError(f"unknown placement policy {name!r} (one of {', '.join(POLICIES)})")
