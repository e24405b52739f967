"""Writing the node signals to the node's NodeSignals resource (kvspread.io/v1alpha1), and
choosing the writer for the configured channel.

Steady state is one request per publication: a JSON merge patch of `spec.document`. The
first write of a collector (or after the object was deleted) finds 404, reads the Node's
uid (for the ownerReference that ties the object's life to the Node's) and creates it;
a 409 on create (another start won the race) falls back to the patch. The collector is
the only writer of its node's object, so the patch needs no resourceVersion precondition.
RBAC: nodesignals create/patch, nodes get (manifests/collector/base/rbac.yaml).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bpf.publish import patch_node_annotation
from kvspread import nodesignals as ns

__all__ = ["NodeSignalsWriter", "PublishError", "channel_writer"]


class PublishError(RuntimeError):
    """A write that cannot succeed until someone acts; the message says what to do."""


_TIMEOUT_S = 10


class NodeSignalsWriter:
    """Writes documents to `node`'s NodeSignals; raises the client's ApiException."""

    def __init__(self, api_client: Any, node: str) -> None:
        from kubernetes import client

        self.node = node
        self._custom = client.CustomObjectsApi(api_client)
        self._core = client.CoreV1Api(api_client)
        self._exists = False
        self.creates = 0

    def __call__(self, document: str) -> None:
        from kubernetes.client.exceptions import ApiException

        if self._exists:
            try:
                self._patch(document)
                return
            except ApiException as exc:
                if exc.status != 404:
                    raise
                self._exists = False  # deleted under us (its Node was re-created?)
        try:
            self._patch(document)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self._create(document)
        self._exists = True

    def _patch(self, document: str) -> None:
        self._custom.patch_cluster_custom_object(
            ns.GROUP,
            ns.VERSION,
            ns.PLURAL,
            self.node,
            ns.document_patch(document),
            _content_type="application/merge-patch+json",
            _request_timeout=_TIMEOUT_S,
        )

    def _create(self, document: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            node = self._core.read_node(self.node, _request_timeout=_TIMEOUT_S)
        except ApiException as exc:
            if exc.status == 404:
                raise PublishError(
                    f"Node {self.node!r} not found: check NODE_NAME (the downward API)"
                ) from None
            raise
        uid = node.metadata.uid if node.metadata is not None else None
        body = ns.build_resource(self.node, uid or "", document)
        try:
            self._custom.create_cluster_custom_object(
                ns.GROUP, ns.VERSION, ns.PLURAL, body, _request_timeout=_TIMEOUT_S
            )
            self.creates += 1
        except ApiException as exc:
            if exc.status == 404:
                raise PublishError(
                    f"no {ns.CRD_NAME} resource on the API server: install the CRD "
                    "(kubectl apply -k manifests/crds) or set publish.channel: annotation"
                ) from None
            if exc.status != 409:
                raise
            self._patch(document)


def channel_writer(channel: str, api_client: Callable[[], Any], node: str) -> Callable[[str], None]:
    """The `write(document)` of `channel`; `api_client()` is called on first use."""
    if channel == "annotation":
        return lambda document: patch_node_annotation(api_client(), node, document)
    if channel != "nodesignals":
        raise ValueError(f"unknown publish channel {channel!r}: expected one of {ns.CHANNELS}")
    writer: list[NodeSignalsWriter] = []

    def write(document: str) -> None:
        if not writer:
            writer.append(NodeSignalsWriter(api_client(), node))
        writer[0](document)

    return write
