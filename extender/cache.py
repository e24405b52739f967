"""The extender's view of the cluster behind one interface, `NodeSource`.

`ClusterState` (the default) holds what the list+watch reflectors
(`kvspread.kube.Reflector`) deliver: `NodeInfo` by node, `PodInfo` of the GPU/kvspread
pods bound to each node, and a `NodeTable` row per node with the `NodeState` the scorer
needs (rebuilt for a node whenever its Node, its pods, its NodeSignals or its ledger
entries change). `ready` turns true after the first full list of both (and of the
NodeSignals resources when `watch_node_signals()` was called: a node's NodeSignals stands
in for its annotation, extender/signals_watch.py, so its signals' age, staleness and
missing-signal tier come from whichever channel supplied them).

`StaticState` serves standalone mode (no API server): it knows no node by name, builds
the nodes of a full-NodeList request from the request body alone, and is always ready.

Both own the placement ledger: `record_placement()` remembers the extender's pick and
updates whatever the pick changes, so the service never touches the ledger itself.

Thread-safety: reflector threads and request handlers share `ClusterState` through
one lock; `take()` returns copies.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from extender.batch import NodeBatch, NodeTable
from extender.config import ScoringConfig
from extender.ledger import Ledger, PodRef
from extender.model import NodeState, PodShape
from extender.objects import NodeInfo, PodInfo, parse_node, parse_pod
from extender.signals_watch import ANNOTATION_SOURCE, NodeSignalsCache
from extender.state import build_node_state
from kvspread.clock import Clock

__all__ = ["NodeSource", "ClusterState", "StaticState"]


class NodeSource(Protocol):
    """What the service needs from the cluster state."""

    ledger: Ledger

    @property
    def ready(self) -> bool: ...

    def synced(self) -> Mapping[str, bool]:
        """Resource -> first list done (for the cache_synced gauge); empty standalone."""
        ...

    def take(
        self, names: Sequence[str], model: str | None = None, pod: PodRef | None = None
    ) -> tuple[NodeBatch, list[int]]:
        """Rows for `names` (request order) and the positions of names not known; the
        ledger entries of `pod` (the pod being decided) are left out of its view."""
        ...

    def take_unordered(
        self, names: Sequence[str], model: str | None, pod: PodRef | None
    ) -> tuple[NodeBatch, np.ndarray | None, list[int]]:
        """`take` with the rows in the cache's own order, so that one node set in any
        order is one batch: (batch, each row's position in `names` or None when that is
        request order, positions of names not known)."""
        ...

    def batch_for(self, infos: Sequence[NodeInfo], pod: PodRef | None = None) -> NodeBatch:
        """Rows for the nodes of a full-NodeList request body, in order (without `pod`'s
        own ledger entries)."""
        ...

    def record_placement(
        self, pod: PodRef, node: str, shape: PodShape, gpus: tuple[int, ...]
    ) -> None:
        """Remember that `pod` was scored best on `node`, GPU slots `gpus`."""
        ...

    def signals_source(self, node: str) -> str:
        """Where `node`'s signals come from now, in words (explain's `signals_from`)."""
        ...


class StaticState:
    """Standalone mode: no caches; the ledger still spreads bursts over NodeList nodes."""

    def __init__(self, cfg: ScoringConfig, ledger: Ledger, clock: Clock) -> None:
        self._cfg = cfg
        self.ledger = ledger
        self._clock = clock

    @property
    def ready(self) -> bool:
        return True

    def synced(self) -> Mapping[str, bool]:
        return {}

    def take(
        self, names: Sequence[str], model: str | None = None, pod: PodRef | None = None
    ) -> tuple[NodeBatch, list[int]]:
        return NodeBatch.from_states([]), list(range(len(names)))

    def take_unordered(
        self, names: Sequence[str], model: str | None, pod: PodRef | None
    ) -> tuple[NodeBatch, np.ndarray | None, list[int]]:
        return NodeBatch.from_states([]), np.zeros(0, dtype=np.intp), list(range(len(names)))

    def batch_for(self, infos: Sequence[NodeInfo], pod: PodRef | None = None) -> NodeBatch:
        now = self._clock.now()
        return NodeBatch.from_states(
            [
                build_node_state(i, (), self.ledger.on_node(i.name, pod), now, self._cfg)
                for i in infos
            ]
        )

    def record_placement(
        self, pod: PodRef, node: str, shape: PodShape, gpus: tuple[int, ...]
    ) -> None:
        self.ledger.record(pod[0], node, shape, gpus, pod[1])

    def signals_source(self, node: str) -> str:
        # Standalone scores only nodes of a full-NodeList body: their annotation is all.
        return f"{ANNOTATION_SOURCE} (request body)"


class ClusterState:
    """Node and pod caches + the node table the scorer reads (see the module docstring)."""

    def __init__(self, cfg: ScoringConfig, ledger: Ledger, clock: Clock) -> None:
        self._cfg = cfg
        self.ledger = ledger
        self._clock = clock
        self._lock = threading.RLock()
        self._nodes: dict[str, NodeInfo] = {}
        self._pods: dict[str, PodInfo] = {}
        self._pods_on: dict[str, dict[str, PodInfo]] = {}
        self._table = NodeTable()
        self._nodes_version = 0
        """Bumped whenever `_nodes` changes (the kept NodeList split is then stale)."""
        self._last_split: tuple[int, set[str], list[NodeInfo], list[int], list[int]] | None = None
        self.nodes_synced = False
        self.pods_synced = False
        self.node_signals: NodeSignalsCache | None = None

    def watch_node_signals(self) -> NodeSignalsCache:
        """Take node signals from NodeSignals resources (extender/signals_watch.py) too;
        returns the cache its reflector feeds."""
        self.node_signals = NodeSignalsCache(self._signals_changed)
        return self.node_signals

    def _signals_of(self, info: NodeInfo) -> NodeInfo:
        return info if self.node_signals is None else self.node_signals.apply(info)

    def signals_source(self, node: str) -> str:
        """Where `node`'s signals come from now (explain)."""
        with self._lock:
            info = self._nodes.get(node)
        if self.node_signals is None:
            return ANNOTATION_SOURCE if info is not None and info.signals_annotation else "none"
        return self.node_signals.source(info, node)

    @property
    def ready(self) -> bool:
        signals = self.node_signals is None or self.node_signals.synced
        return self.nodes_synced and self.pods_synced and signals

    def synced(self) -> Mapping[str, bool]:
        out = {"nodes": self.nodes_synced, "pods": self.pods_synced}
        if self.node_signals is not None:
            out["nodesignals"] = self.node_signals.synced
        return out

    # --- feeding ------------------------------------------------------------------------
    def replace_nodes(self, items: Iterable[dict[str, Any]]) -> None:
        with self._lock:
            infos = [parse_node(o) for o in items]
            new = {i.name: i for i in infos if i.name}
            for gone in set(self._nodes) - set(new):
                self._table.remove(gone)
            self._nodes = new
            self._nodes_version += 1
            for name in new:
                self._refresh(name)
            self.nodes_synced = True

    def node_event(self, etype: str, obj: dict[str, Any]) -> None:
        info = parse_node(obj)
        if not info.name:
            return
        with self._lock:
            self._nodes_version += 1
            if etype == "DELETED":
                self._nodes.pop(info.name, None)
                self._table.remove(info.name)
                return
            self._nodes[info.name] = info
            self._refresh(info.name)

    def replace_pods(self, items: Iterable[dict[str, Any]]) -> None:
        with self._lock:
            old_nodes = set(self._pods_on)
            self._pods = {}
            self._pods_on = {}
            for o in items:
                self._add_pod(parse_pod(o))
            for name in old_nodes | set(self._pods_on):
                self._refresh(name)
            self.pods_synced = True

    def pod_event(self, etype: str, obj: dict[str, Any]) -> None:
        pod = parse_pod(obj)
        if pod.name:
            with self._lock:
                for name in self._pod_changed(etype, pod):
                    if name:
                        self._refresh(name)

    def _pod_changed(self, etype: str, pod: PodInfo) -> set[str]:
        """Apply one pod event to the pod caches; returns the nodes whose view changed."""
        touched = set()
        old = self._pods.pop(pod.key, None)
        if old is not None:
            self._pods_on.get(old.node_name, {}).pop(old.key, None)
            touched.add(old.node_name)
        if etype == "DELETED":
            was = self.ledger.forget(pod.key)
            if was:
                touched.add(was)
        else:
            self._add_pod(pod)
            touched.add(pod.node_name)
        return touched

    def _add_pod(self, pod: PodInfo) -> None:
        if not pod.node_name:
            return
        was = self.ledger.bound(pod.key, pod.node_name)  # the entry has done its job
        if was and was != pod.node_name:
            self._refresh(was)
        if not pod.active or (pod.shape.gpus <= 0 and not pod.shape.model):
            return
        self._pods[pod.key] = pod
        self._pods_on.setdefault(pod.node_name, {})[pod.key] = pod

    def _state(self, info: NodeInfo, now: float, pod: PodRef | None = None) -> NodeState:
        """The node as the scorer sees it (signals from its NodeSignals when it has one),
        without `pod`'s own ledger entries."""
        return build_node_state(
            self._signals_of(info),
            self._pods_on.get(info.name, {}).values(),
            self.ledger.on_node(info.name, pod),
            now,
            self._cfg,
        )

    def _refresh(self, name: str) -> None:
        info = self._nodes.get(name)
        if info is not None:
            self._table.set(self._state(info, self._clock.now()))

    def _signals_changed(self, nodes: Iterable[str]) -> None:
        """Rebuild the rows of nodes whose NodeSignals changed."""
        with self._lock:
            for name in nodes:
                self._refresh(name)

    def record_placement(
        self, pod: PodRef, node: str, shape: PodShape, gpus: tuple[int, ...]
    ) -> None:
        """Remember the placement and rebuild the rows of nodes whose view changed."""
        with self._lock:
            for name in self.ledger.record(pod[0], node, shape, gpus, pod[1]):
                self._refresh(name)

    # --- reading ------------------------------------------------------------------------
    def take(
        self, names: Sequence[str], model: str | None = None, pod: PodRef | None = None
    ) -> tuple[NodeBatch, list[int]]:
        """Rows for `names` (request order) and the positions of names not in the cache;
        `model` precomputes that model's replica counts. The rows of nodes holding `pod`'s
        own ledger entries are rebuilt without them."""
        with self._lock:
            now = self._clock.now()
            views = self._own_views(now, pod)
            return self._table.take(names, now, self._cfg.stale_after_s, model, views)

    def take_unordered(
        self, names: Sequence[str], model: str | None, pod: PodRef | None
    ) -> tuple[NodeBatch, np.ndarray | None, list[int]]:
        """`take` in table order (NodeTable.take(..., table_order=True))."""
        with self._lock:
            now = self._clock.now()
            stale = self._cfg.stale_after_s
            views = self._own_views(now, pod)
            batch, missing = self._table.take(names, now, stale, model, views, table_order=True)
            return batch, self._table.request_positions(names), missing

    def _own_views(self, now: float, pod: PodRef | None) -> dict[str, NodeState]:
        """The nodes holding `pod`'s own ledger entries as `pod` sees them (without those
        entries), built at `now` so that their freshness is current; call with the lock."""
        own = self.ledger.nodes_of(pod) if pod is not None else set()
        return {n: self._state(self._nodes[n], now, pod) for n in own if n in self._nodes}

    def batch_for(self, infos: Sequence[NodeInfo], pod: PodRef | None = None) -> NodeBatch:
        """Column batch for nodes given in a request body (full NodeList mode), in order.

        A node whose labels and signals annotation are what the cache already holds is
        taken from the table (no rebuild); the others are built from the body.
        """
        with self._lock:
            own = self.ledger.nodes_of(pod) if pod is not None else set()
            known_pos, other_pos = self._split(infos, own)
            if not other_pos:
                batch, _ = self._table.take(
                    [infos[p].name for p in known_pos], self._clock.now(), self._cfg.stale_after_s
                )
                return batch
            now = self._clock.now()
            built = NodeBatch.from_states([self._state(infos[p], now, pod) for p in other_pos])
            if not known_pos:
                return built
            known, _ = self._table.take(
                [infos[p].name for p in known_pos], now, self._cfg.stale_after_s
            )
        order = np.empty(len(infos), dtype=np.intp)
        order[np.asarray(known_pos + other_pos, dtype=np.intp)] = np.arange(len(infos))
        return NodeBatch.concat([known, built]).take(order)

    def _split(self, infos: Sequence[NodeInfo], own: set[str]) -> tuple[list[int], list[int]]:
        """(positions of `infos` the cache holds as they are, the other positions); nodes
        in `own` count as other. The split of the last NodeList is kept while no node
        changed: the scheduler sends the same nodes call after call, and extender/nodelist.py
        hands out the same NodeInfo objects for unchanged nodes, so the check is a list
        comparison of identical objects."""
        last = self._last_split
        if (
            last is not None
            and last[0] == self._nodes_version
            and last[1] == own
            and last[2] == infos
        ):
            return last[3], last[4]
        known_pos: list[int] = []
        other_pos: list[int] = []
        cached = self._nodes
        for pos, info in enumerate(infos):
            same = cached.get(info.name) == info and info.name not in own
            (known_pos if same else other_pos).append(pos)
        self._last_split = (self._nodes_version, set(own), list(infos), known_pos, other_pos)
        return known_pos, other_pos

    def node_names(self) -> list[str]:
        with self._lock:
            return self._table.row_names()

    def pods_on(self, node: str) -> list[PodInfo]:
        with self._lock:
            return list(self._pods_on.get(node, {}).values())

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return len(self._nodes), len(self._pods)
