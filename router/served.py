"""Which endpoint really served a request, read from Envoy's response-headers message, so
the picker credits its load to that pod and not to the one it picked when they differ (a
retry that moved down the fallback list, a gateway's own failover).

Two sources, the first found wins:
1. GIE's protocol: filter metadata `envoy.lb` / `x-gateway-destination-endpoint-served`
   in `metadata_context` (a data plane that implements it sets it; stock Envoy 1.40 does
   not: measured, docs/router.md "Served endpoint").
2. The ext_proc attribute `upstream.address` (the upstream connection's peer, `ip:port`),
   which stock Envoy sends when the filter asks for it with
   `response_attributes: ["upstream.address"]`.
"""

from __future__ import annotations

from router.proto import ext_proc_pb2 as pb

__all__ = ["SERVED_KEY", "ATTRIBUTE", "served_endpoint"]

SERVED_NAMESPACE = "envoy.lb"
SERVED_KEY = "x-gateway-destination-endpoint-served"
ATTRIBUTE = "upstream.address"
_MAX_LEN = 64
"""Longest address taken (`[v6]:port` is at most 47 characters); longer is ignored."""


def _string(value: object) -> str | None:
    text = getattr(value, "string_value", "")
    if not isinstance(text, str) or not text or len(text) > _MAX_LEN:
        return None
    return text.strip() or None


def served_endpoint(req: pb.ProcessingRequest) -> str | None:
    """The served endpoint's `ip:port` as Envoy reported it, or None when it did not."""
    if req.HasField("metadata_context"):
        ns = req.metadata_context.filter_metadata.get(SERVED_NAMESPACE)
        if ns is not None and SERVED_KEY in ns.fields:
            found = _string(ns.fields[SERVED_KEY])
            if found:
                return found
    for attrs in req.attributes.values():  # keyed by the filter's name
        if ATTRIBUTE in attrs.fields:
            found = _string(attrs.fields[ATTRIBUTE])
            if found:
                return found
    return None
