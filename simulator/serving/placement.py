"""Where a new model instance goes: the placement policies under comparison.

- `kube-default`: kube-scheduler's default profile without an extender
  (simulator.serving.kubedefault).
- `round-robin`: nodes in turn. Counts only time-slicing slots (`nvidia.com/gpu`
  replicas), not memory: the behaviour of a default scheduler with a time-sliced device
  plugin, which does not enforce GPU memory.
- `memory-weighted`: the node with the most free GPU memory (sum over its GPUs of
  free_g = total - max(used, allocated)) among nodes with a GPU that fits the request.
- `kvspread`: the extender's own code end to end: Node and Pod objects parsed by
  `extender.objects`, the collector's last `kvspread.io/signals` document (encoded with
  `kvspread.signals`), NodeStates from `extender.state.build_node_state`, the filter
  `extender.fit.check_fit` and prioritize `extender.scoring.score_nodes`; the best 0..10
  score wins, ties broken at random as kube-scheduler does.

A policy picks a node. Each also names the GPU it would prefer (round-robin the one with
the fewest pods, memory-weighted the one with the most free memory, kvspread the slot its
scoring chose), but none of them can pin it: kube-scheduler binds a pod to a node and the
device plugin picks the GPU, so the simulation takes `cluster.device_plugin_gpu` for every
policy alike and only counts how often the preference differed. Every policy also
respects time-slicing slots (kube-scheduler's own resource fit runs before any extender).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from extender.config import ScoringConfig
from extender.fit import check_fit
from extender.model import NodeState, PodShape
from extender.objects import parse_node, parse_pod
from extender.scoring import score_nodes
from extender.shapes import ShapeDistribution
from extender.state import build_node_state
from kvspread import names
from kvspread.signals import GpuSignal, NodeSignals, encode_signals
from simulator.serving.cluster import Gpu, Node, device_plugin_gpu, resource_fit
from simulator.serving.kubedefault import KubeDefault

__all__ = [
    "POLICIES",
    "NodeView",
    "BoundPod",
    "PlacementPolicy",
    "RoundRobin",
    "MemoryWeighted",
    "Kvspread",
    "ClusterSnapshot",
    "make_policy",
]

POLICIES = ("kube-default", "round-robin", "memory-weighted", "kvspread")


@dataclass(frozen=True)
class NodeView:
    """What the simulated collector last published for one node (docs/design.md section 3):
    per GPU the memory used (MiB), utilisation (NVML's busy share), KV blocks and models
    served; the node's in-flight `streams`, `image_token_share` of recent tokens and
    `p95_s` request latency (None when not measured). `annotation()` is the
    `kvspread.io/signals` document itself."""

    ts: float
    node: str
    used_mib: tuple[float, ...]
    total_mib: tuple[float, ...]
    streams: int
    image_token_share: float | None
    p95_s: float | None = None
    models: tuple[tuple[str, ...], ...] = ()
    kv_blocks: tuple[tuple[int, int] | None, ...] = ()
    util: tuple[float | None, ...] = ()

    def annotation(self) -> str:
        """The node annotation, encoded by the project's signals codec."""
        return encode_signals(self.signals())

    def signals(self) -> NodeSignals:
        """The document as `kvspread.signals.NodeSignals` (utilisation absent when the view
        carries none, never zero-filled)."""
        gpus = []
        for i, (used, total) in enumerate(zip(self.used_mib, self.total_mib, strict=True)):
            kv = self.kv_blocks[i] if i < len(self.kv_blocks) else None
            gpus.append(
                GpuSignal(
                    index=i,
                    mem_total_mib=total,
                    mem_used_mib=min(used, total),
                    uuid=f"GPU-{self.node}-{i}",
                    util=self.util[i] if i < len(self.util) else None,
                    kv_blocks_total=None if kv is None else kv[0],
                    kv_blocks_used=None if kv is None else kv[1],
                    models=self.models[i] if i < len(self.models) else (),
                )
            )
        return NodeSignals(
            ts=self.ts,
            node=self.node,
            gpus=tuple(gpus),
            streams=self.streams,
            image_token_share=self.image_token_share,
            p95_s=self.p95_s,
            absent=() if self.util else ("util",),
        )


@dataclass(frozen=True)
class Want:
    """The pod to place: its service's model, request kind, QoS, memory request per GPU
    and GPU count (`nvidia.com/gpu`, its tensor-parallel degree)."""

    model: str
    modality: str
    qos: str
    request_gib: float
    gpus: int = 1


@dataclass(frozen=True, kw_only=True)
class BoundPod(Want):
    """A model instance bound to a node, as the extender's pod cache would list it: what
    was wanted for it, and its pod name."""

    name: str


@dataclass(frozen=True)
class ClusterSnapshot:
    """What every policy sees when it places a pod: the nodes, the time-slicing slots per
    GPU, the collector's last view of each node (by node index), the model instances bound
    to each node, and the simulated time."""

    nodes: list[Node]
    slots: int
    views: Mapping[int, NodeView] = field(default_factory=dict)
    bound: Mapping[int, list[BoundPod]] = field(default_factory=dict)
    now: float = 0.0


class PlacementPolicy(Protocol):
    name: str

    def choose(self, want: Want, seen: ClusterSnapshot) -> tuple[int, int] | None:
        """(node index, GPU index) or None when the pod is unschedulable now."""
        ...


def _has_slot(g: Gpu, slots: int) -> bool:
    return len(g.occupants) < slots


class RoundRobin:
    name = "round-robin"

    def __init__(self, rng: np.random.Generator) -> None:
        self._next = 0

    def choose(self, want: Want, seen: ClusterSnapshot) -> tuple[int, int] | None:
        nodes, slots = seen.nodes, seen.slots
        n = len(nodes)
        for i in range(n):
            node = nodes[(self._next + i) % n]
            open_gpus = [g for g in node.gpus if _has_slot(g, slots)]
            if open_gpus and resource_fit(node, slots, want.gpus):
                g = min(open_gpus, key=lambda x: (len(x.occupants), x.index))
                self._next = (node.index + 1) % n
                return node.index, g.index
        return None


class MemoryWeighted:
    name = "memory-weighted"

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def choose(self, want: Want, seen: ClusterSnapshot) -> tuple[int, int] | None:
        best: list[tuple[int, int]] = []
        best_free = -1.0
        slots = seen.slots
        for node in seen.nodes:
            fits = [g for g in node.gpus if _has_slot(g, slots) and g.free_gib >= want.request_gib]
            if len(fits) < want.gpus or not resource_fit(node, slots, want.gpus):
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
    """Placement through the extender's own ingest, filter and scoring code.

    Each decision builds the Kubernetes objects the extender would read (v1 Node dicts
    with the `kvspread.io/signals` annotation the simulated collector published, v1 Pod
    dicts of the bound model instances), parses them with `extender.objects`, assembles
    NodeStates with `extender.state.build_node_state` (which reads each bound pod's GPU
    from the signals, or predicts the device plugin's pick while the collector has not
    seen the pod yet, as the real extender does), filters with `extender.fit.check_fit` and scores with
    `extender.scoring.score_nodes`. Other tenants' pods are not kvspread pods: they show
    only through the measured memory.
    """

    name = "kvspread"

    def __init__(self, rng: np.random.Generator, cfg: ScoringConfig | None = None) -> None:
        self._rng = rng
        self.cfg = cfg or ScoringConfig()
        self.shapes = ShapeDistribution(self.cfg)
        self.last_scores: list[tuple[str, int]] = []

    @staticmethod
    def node_object(node: Node, slots: int, view: NodeView | None) -> dict[str, Any]:
        labels = {names.LABEL_POOL: node.pool, names.LABEL_NVLINK: str(node.nvlink).lower()}
        annotations = {} if view is None else {names.ANNOTATION_SIGNALS: view.annotation()}
        return {
            "metadata": {"name": node.name, "labels": labels, "annotations": annotations},
            "status": {"allocatable": {names.RESOURCE_GPU: str(len(node.gpus) * slots)}},
        }

    @staticmethod
    def pod_object(pod: BoundPod, node: str) -> dict[str, Any]:
        return {
            "metadata": {
                "namespace": "inference",
                "name": pod.name,
                "uid": f"uid-{pod.name}",
                "labels": {
                    names.LABEL_MODEL: pod.model,
                    names.LABEL_MODALITY: pod.modality,
                    names.LABEL_QOS: pod.qos,
                },
                "annotations": {names.ANNOTATION_GPU_MEMORY: f"{pod.request_gib:g}Gi"},
            },
            "spec": {
                "nodeName": node,
                "containers": [
                    {
                        "name": "engine",
                        "resources": {"limits": {names.RESOURCE_GPU: str(pod.gpus)}},
                    }
                ],
            },
            "status": {"phase": "Running"},
        }

    def node_states(self, seen: ClusterSnapshot) -> list[NodeState]:
        """NodeStates exactly as the extender builds them from Node and Pod objects."""
        out = []
        for node in seen.nodes:
            info = parse_node(self.node_object(node, seen.slots, seen.views.get(node.index)))
            bound = seen.bound.get(node.index, [])
            pods = [parse_pod(self.pod_object(p, node.name)) for p in bound]
            out.append(build_node_state(info, pods, (), seen.now, self.cfg))
        return out

    def choose(self, want: Want, seen: ClusterSnapshot) -> tuple[int, int] | None:
        pod = PodShape(
            gpus=want.gpus,
            mem_per_gpu_mib=want.request_gib * 1024.0,
            model=want.model,
            modality=want.modality,
            qos=want.qos,
        )
        self.shapes.observe(pod)
        slots = seen.slots
        by_name = {n.name: n for n in seen.nodes}
        states = self.node_states(seen)
        # kube-scheduler's own resource fit first: free nvidia.com/gpu on the node
        states = [s for s in states if resource_fit(by_name[s.name], slots, want.gpus)]
        passing = [s for s in states if check_fit(pod, s, self.cfg).fits]
        if not passing:
            return None
        scores = [s for s in score_nodes(pod, passing, self.cfg, self.shapes.snapshot()) if s.fits]
        if not scores:
            return None
        self.last_scores = [(s.name, s.score) for s in scores]
        top = max(s.score for s in scores)
        best = [s for s in scores if s.score == top]
        pick = best[int(self._rng.integers(len(best)))]
        node = by_name[pick.name]
        if pick.gpus_chosen:
            return node.index, pick.gpus_chosen[0]
        dp = device_plugin_gpu(node, slots)  # no fresh signals: no slot was scored
        return None if dp is None else (node.index, dp.index)


_MAKERS: dict[str, Callable[[np.random.Generator, ScoringConfig | None], PlacementPolicy]] = {
    "kube-default": lambda rng, cfg: KubeDefault(rng),
    "round-robin": lambda rng, cfg: RoundRobin(rng),
    "memory-weighted": lambda rng, cfg: MemoryWeighted(rng),
    "kvspread": Kvspread,
}


def make_policy(
    name: str, rng: np.random.Generator, cfg: ScoringConfig | None = None
) -> PlacementPolicy:
    """The policy called `name` (one of POLICIES)."""
    if name not in _MAKERS:
        raise ValueError(f"unknown placement policy {name!r} (one of {', '.join(POLICIES)})")
    return _MAKERS[name](rng, cfg)
