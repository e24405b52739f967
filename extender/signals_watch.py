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

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from extender.objects import NodeInfo
from kvspread import names
from kvspread import nodesignals as ns
from kvspread.kube import Backoff, Reflector

if TYPE_CHECKING:
    from extender.config import ExtenderConfig

__all__ = ["NodeSignalsCache", "ANNOTATION_SOURCE", "node_signals_reflector"]

ANNOTATION_SOURCE = f"annotation {names.ANNOTATION_SIGNALS}"


class NodeSignalsCache(ns.NodeSignalsCache):
    """The shared cache (kvspread/nodesignals.py) as the extender reads it: into a
    node's `NodeInfo`, and in words for explain."""

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
    k = cfg.kubernetes
    return ns.watch(
        api_client,
        cache,
        watch_timeout_s=k.watch_timeout_s,
        backoff=Backoff(k.backoff_base_s, k.backoff_max_s),
    )
