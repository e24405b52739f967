"""Authorization attributes of a request, as kube-apiserver's request-info resolver
assigns them (k8s.io/apiserver/pkg/endpoints/request/requestinfo.go, `NewRequestInfo`).

Why it matters: the aggregator has already authorized the request with these attributes
before proxying it here, so the adapter's own SubjectAccessReview must ask for the same
verb, or a user needs two verbs to read one metric. The rules, for GET/HEAD:

- fewer than three segments under `/apis` (`/apis/GROUP/VERSION`), or not under
  `/api`/`/apis` at all: a non-resource request, verb `get`, the path as is.
- `/apis/GROUP/VERSION/namespaces/NS/RESOURCE[/NAME[/SUBRESOURCE]]`: a resource request in
  namespace NS (`/namespaces/NS` alone is resource `namespaces`, name NS; `status` and
  `finalize` right after NS are its subresources).
- no NAME: the verb is `list`, or `watch` with `?watch=true`; so an external metric read
  (`.../namespaces/NS/METRIC`, a collection of ExternalMetricValue) is `list`.
- a leading `watch` or `proxy` segment after the version is the verb itself.

Other methods map as kube-apiserver maps them (POST create, PUT update, PATCH patch,
DELETE delete / deletecollection); the adapter answers them 405 after authorizing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from metrics_adapter.auth import Attributes

__all__ = ["request_attributes"]

_SPECIAL_VERBS = frozenset({"proxy", "watch"})
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_METHOD_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}
_TRUE = frozenset({"true", "1", "t", "True", "TRUE", "T"})  # Go's strconv.ParseBool


def request_attributes(
    method: str, path: str, query: Mapping[str, Sequence[str]] | None = None
) -> Attributes:
    """The `Attributes` kube-apiserver would authorize `method path?query` with."""
    non_resource = Attributes(method.lower(), path)
    parts = [p for p in path.strip("/").split("/") if p] if path.strip("/") else []
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return non_resource
    prefix, parts = parts[0], parts[1:]
    group = ""
    if prefix == "apis":
        if len(parts) < 3:
            return non_resource
        group, parts = parts[0], parts[1:]
    version, parts = parts[0], parts[1:]
    if parts[0] in _SPECIAL_VERBS:
        if len(parts) < 2:
            return non_resource  # kube-apiserver answers this with an error
        verb, parts = parts[0], parts[1:]
    else:
        verb = _METHOD_VERBS.get(method.upper(), "")
    namespace: str | None = None
    if parts[0] == "namespaces":
        if len(parts) > 1:
            namespace = parts[1]
            if len(parts) > 2 and parts[2] not in _NAMESPACE_SUBRESOURCES:
                parts = parts[2:]
    resource = parts[0]
    name = parts[1] if len(parts) >= 2 else None
    subresource = parts[2] if len(parts) >= 3 else None
    if name is None and verb == "get":
        watch = (query or {}).get("watch", [])
        verb = "watch" if watch and watch[-1] in _TRUE else "list"
    if name is None and verb == "delete":
        verb = "deletecollection"
    return Attributes(verb, path, namespace, group, version, resource, name, subresource)
