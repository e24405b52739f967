"""The `NodeSignals` custom resource (kvspread.io/v1alpha1): the node-signals channel that
scales (issue 12, point 5). Pure encode/decode; no I/O.

One cluster-scoped object per node, named after the node, owned by the Node (an
ownerReference, so the garbage collector deletes it with the Node). Its payload is the
`kvspread/signals.py` document, byte for byte, in `spec.document`: one format on every
channel (annotation, resource, `GET /signals`), versioned and at most 4 KiB::

    apiVersion: kvspread.io/v1alpha1
    kind: NodeSignals
    metadata:
      name: gpu-node-1
      ownerReferences: [{apiVersion: v1, kind: Node, name: gpu-node-1, uid: ...}]
    spec:
      document: '{"v":1,"ts":1800000000.0,"node":"gpu-node-1","gpus":[...]}'
      measuredAt: "2027-01-15T08:00:00Z"   # from the document, for kubectl get's columns
      gpus: 8
      largestFreeMiB: 61440

`measuredAt`, `gpus` and `largestFreeMiB` are a summary of the document, written beside it
on every write so that `kubectl get nodesignals` can show them (printer columns read JSON
paths, not JSON inside a string); readers use the document alone.

Why a resource and not the Node annotation: every Node write (~15 KB with managedFields)
goes to every watcher of all Nodes; a NodeSignals write (~1 KB) goes only to the
extender's and the router's watches. The arithmetic is in docs/collector.md.

Readers (the extender, the router) share `NodeSignalsCache`, the documents by node fed by
list+watch events, and `watch`, the list+watch itself (kvspread/kube.py's `Reflector`);
the cache holds only data and the Reflector is built here but run by the reader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kvspread.kube import WatchedTable, lookup, lookup_str
from kvspread.signals import MAX_DOCUMENT_BYTES, SignalsError, decode_signals

if TYPE_CHECKING:
    from kvspread.kube import Backoff, Reflector

__all__ = [
    "GROUP",
    "VERSION",
    "API_VERSION",
    "KIND",
    "LIST_KIND",
    "PLURAL",
    "CRD_NAME",
    "CHANNELS",
    "NodeSignalsObject",
    "owner_reference",
    "build_resource",
    "document_patch",
    "parse_resource",
    "NodeSignalsCache",
    "watch",
]

GROUP: Final = "kvspread.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "NodeSignals"
LIST_KIND: Final = "NodeSignalsList"
PLURAL: Final = "nodesignals"
CRD_NAME: Final = f"{PLURAL}.{GROUP}"
CHANNELS: Final = ("nodesignals", "annotation")
"""Where the collector publishes: the NodeSignals resource, or the Node annotation."""

_MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "kvspread-collector"}


@dataclass(frozen=True, slots=True)
class NodeSignalsObject:
    """What a reader needs from one NodeSignals object: whose, the document, which version."""

    node: str
    document: str
    resource_version: str

    @property
    def source(self) -> str:
        """Where the signals came from, for explain and logs."""
        return f"{KIND} {self.node} (resourceVersion {self.resource_version or '?'})"


def owner_reference(node: str, node_uid: str) -> dict[str, Any]:
    """The Node as owner: the garbage collector deletes the NodeSignals with its Node.

    Not `controller: true`: the Node controller does not manage it; no
    `blockOwnerDeletion`: a Node's deletion must never wait on its signals.
    """
    if not node or not node_uid:
        raise ValueError("an owner reference needs the Node's name and uid")
    return {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}


def build_resource(node: str, node_uid: str, document: str) -> dict[str, Any]:
    """The object to create for `node` carrying `document` (the signals wire JSON)."""
    _check_document(document)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": node,
            "labels": dict(_MANAGED_BY),
            "ownerReferences": [owner_reference(node, node_uid)],
        },
        "spec": {"document": document, **summary(document)},
    }


def document_patch(document: str) -> dict[str, Any]:
    """JSON merge patch that replaces the document and its summary (and nothing else)."""
    _check_document(document)
    return {"spec": {"document": document, **summary(document)}}


def summary(document: str) -> dict[str, Any]:
    """The printer columns' fields of a document (empty when it does not decode):
    measurement time (RFC 3339, UTC), GPU count, the largest free memory of one GPU."""
    import datetime

    try:
        sig = decode_signals(document)
    except SignalsError:
        return {}
    gpus = sig.gpus or ()
    at = datetime.datetime.fromtimestamp(sig.ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    free = [max(0.0, g.mem_total_mib - g.mem_used_mib) for g in gpus]
    return {"measuredAt": at, "gpus": len(gpus), "largestFreeMiB": int(max(free, default=0.0))}


def _check_document(document: str) -> None:
    if not isinstance(document, str) or not document:
        raise ValueError("the signals document must be a non-empty string")
    if len(document.encode()) > MAX_DOCUMENT_BYTES:
        raise ValueError(f"the signals document is over {MAX_DOCUMENT_BYTES} bytes")


def parse_resource(obj: Any) -> NodeSignalsObject | None:
    """Read a NodeSignals object from the API (list item or watch event object).

    None when it is not a NodeSignals or has no name. Never raises: the document is
    returned as text and judged by `kvspread.signals` (missing -> "", invalid -> its
    reason), like the annotation.
    """
    if not isinstance(obj, dict) or obj.get("kind", KIND) != KIND:
        return None
    name = lookup_str(obj, "metadata", "name")
    if not name:
        return None
    rv = lookup(obj, "metadata", "resourceVersion")
    return NodeSignalsObject(
        node=name,
        document=lookup_str(obj, "spec", "document"),
        resource_version=str(rv) if rv is not None else "",
    )


def _node_of(o: NodeSignalsObject) -> str:
    return o.node


class NodeSignalsCache(WatchedTable[NodeSignalsObject]):
    """NodeSignals by node name, kept equal to the API's by a list+watch; `on_change(nodes)`
    after each update, outside the lock, with the names of the nodes it touched (sorted;
    not called when a re-list changed nothing).

    ADDED/MODIFIED set a node's object, DELETED removes it (its readers fall back to the
    annotation), a re-list replaces them all.
    """

    def __init__(self, on_change: Callable[[Iterable[str]], None] | None = None) -> None:
        super().__init__(parse_resource, _node_of, self._changed)
        self.on_change = on_change

    def _changed(self, nodes: set[str]) -> None:
        if nodes and self.on_change is not None:
            self.on_change(sorted(nodes))


def watch(
    api_client: Any,
    cache: NodeSignalsCache,
    *,
    watch_timeout_s: int = 300,
    backoff: Backoff | None = None,
) -> Reflector:
    """A list+watch of every NodeSignals (cluster-scoped) into `cache`; the caller starts
    and stops it (RBAC: list, watch on nodesignals.kvspread.io)."""
    from kvspread.kube import Reflector, path_list_call

    return Reflector(
        PLURAL,
        path_list_call(api_client, f"/apis/{GROUP}/{VERSION}/{PLURAL}"),
        cache.replace_all,
        cache.event,
        watch_timeout_s=watch_timeout_s,
        backoff=backoff,
    )
