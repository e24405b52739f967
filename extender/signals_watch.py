"""The extender's view of NodeSignals resources (kvspread.io/v1alpha1): the collector's
per-node signals channel that scales (docs/collector.md), fed by a list+watch.

A node's NodeSignals, when it has one, is where its signals come from; otherwise its
`kvspread.io/signals` annotation (collectors on `publish.channel: annotation`, or not
upgraded yet). The document is the same format either way, so the resource's document
simply stands in for the annotation text in the node's `NodeInfo`, and everything
downstream (decoding, staleness, scoring) is unchanged.

ADDED/MODIFIED set the node's document, DELETED removes it (back to the annotation), a
re-list replaces them all; each change asks the cluster state to rebuild the rows of the
nodes it touched.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from extender.objects import NodeInfo
from kvspread import names
from kvspread import nodesignals as ns
from kvspread.kube import Backoff, Reflector
from kvspread.nodesignals import NodeSignalsObject, parse_resource

if TYPE_CHECKING:
    from extender.config import ExtenderConfig

__all__ = ["NodeSignalsCache", "ANNOTATION_SOURCE", "node_signals_reflector"]

ANNOTATION_SOURCE = f"annotation {names.ANNOTATION_SIGNALS}"


class NodeSignalsCache:
    """NodeSignals by node name; `on_change(nodes)` after each update (outside the lock)."""

    def __init__(self, on_change: Callable[[Iterable[str]], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._by_node: dict[str, NodeSignalsObject] = {}
        self.on_change = on_change
        self.synced = False

    def replace_all(self, items: Iterable[dict[str, Any]]) -> None:
        """A full list: these objects and no others."""
        parsed = [o for o in (parse_resource(i) for i in items) if o is not None]
        new = {o.node: o for o in parsed}
        with self._lock:
            old = self._by_node
            changed = {n for n in set(old) | set(new) if old.get(n) != new.get(n)}
            self._by_node = new
            self.synced = True
        self._changed(changed)

    def event(self, etype: str, obj: dict[str, Any]) -> None:
        """One watch event."""
        o = parse_resource(obj)
        if o is None:
            return
        with self._lock:
            if etype == "DELETED":
                self._by_node.pop(o.node, None)
            else:
                self._by_node[o.node] = o
        self._changed({o.node})

    def _changed(self, nodes: set[str]) -> None:
        if nodes and self.on_change is not None:
            self.on_change(sorted(nodes))

    def get(self, node: str) -> NodeSignalsObject | None:
        with self._lock:
            return self._by_node.get(node)

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_node)

    def apply(self, info: NodeInfo) -> NodeInfo:
        """`info` with its signals taken from its NodeSignals when it has one."""
        o = self.get(info.name)
        if o is None:
            return info
        return replace(info, signals_annotation=o.document)

    def source(self, info: NodeInfo | None, node: str) -> str:
        """Where `node`'s signals come from, in words (explain)."""
        o = self.get(node)
        if o is not None:
            return o.source
        if info is not None and info.signals_annotation:
            return ANNOTATION_SOURCE
        return "none (no NodeSignals, no annotation)"


def node_signals_reflector(
    api_client: Any, cache: NodeSignalsCache, cfg: ExtenderConfig
) -> Reflector:
    """A list+watch of every NodeSignals (cluster-scoped) into `cache` (RBAC: list, watch)."""
    from functools import partial

    from kubernetes import client

    custom = client.CustomObjectsApi(api_client)
    k = cfg.kubernetes
    return Reflector(
        ns.PLURAL,
        partial(custom.list_cluster_custom_object, ns.GROUP, ns.VERSION, ns.PLURAL),
        cache.replace_all,
        cache.event,
        watch_timeout_s=k.watch_timeout_s,
        backoff=Backoff(k.backoff_base_s, k.backoff_max_s),
    )
