"""The kube-scheduler extender v1 wire format (k8s.io/kube-scheduler/extender/v1).

Requests (`ExtenderArgs`) carry Go field names without JSON tags: `Pod`, `Nodes` (a
full v1 NodeList when the extender is registered with `nodeCacheCapable: false`) and
`NodeNames` (the names only, with `nodeCacheCapable: true`); the other is null. Go's
encoding/json matches keys case-insensitively, so any letter case is accepted here too;
unknown keys are ignored. Answers use the exact Go names:

    filter:      {"Nodes": NodeList|null, "NodeNames": [..]|null, "FailedNodes": {name: why},
                  "FailedAndUnresolvableNodes": {name: why}, "Error": ""}
    prioritize:  [{"Host": name, "Score": 0..10}, ...]

A body that is not JSON, or not an ExtenderArgs, raises `WireError` with a message
saying what is wrong (the server answers 400). JSON is parsed and written with orjson
when it is installed (several times faster on 5,000-node NodeLists), else the stdlib.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

try:  # orjson: optional speed-up; identical output for these documents
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised where orjson is absent
    _orjson = None  # type: ignore[assignment]

from extender.decisions import FilterDecision, PrioritizeDecision
from extender.objects import field

__all__ = [
    "WireError",
    "ExtenderArgs",
    "parse_args",
    "encode_filter",
    "encode_prioritize",
    "loads",
    "dumps",
]


class WireError(ValueError):
    """The request body is not a usable ExtenderArgs; the message says why."""


def loads(body: bytes | str) -> Any:
    if _orjson is not None:
        return _orjson.loads(body)
    return json.loads(body)


def dumps(doc: Any) -> bytes:
    if _orjson is not None:
        return _orjson.dumps(doc)
    return json.dumps(doc, separators=(",", ":")).encode()


@dataclass(frozen=True)
class ExtenderArgs:
    """A parsed request. `names` lists the candidate nodes in request order (both modes)."""

    pod: dict[str, Any]
    nodes: list[dict[str, Any]] | None
    node_names: list[str] | None
    names: list[str]
    node_list_meta: Any = None

    @property
    def names_only(self) -> bool:
        return self.nodes is None


def _top(doc: Mapping[str, Any], key: str) -> tuple[bool, Any]:
    if key in doc:
        return True, doc[key]
    low = key.lower()
    for k, v in doc.items():
        if isinstance(k, str) and k.lower() == low:
            return True, v
    return False, None


def parse_args(body: bytes | str) -> ExtenderArgs:
    """Parse and check an ExtenderArgs body. Raises WireError (-> HTTP 400)."""
    if not body or not (body.strip() if isinstance(body, bytes | str) else True):
        raise WireError("request body is empty: expected ExtenderArgs JSON {Pod, Nodes|NodeNames}")
    try:
        doc = loads(body)
    except (ValueError, TypeError) as exc:
        raise WireError(f"request body is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise WireError(
            f"ExtenderArgs must be a JSON object with Pod and Nodes or NodeNames, "
            f"got {type(doc).__name__}"
        )
    has_pod, pod = _top(doc, "Pod")
    if not has_pod or pod is None:
        raise WireError("ExtenderArgs.Pod is missing: the pod being scheduled is required")
    if not isinstance(pod, dict):
        raise WireError(f"ExtenderArgs.Pod must be a v1 Pod object, got {type(pod).__name__}")
    meta = field(pod, "metadata")
    if meta is not None and not isinstance(meta, dict):
        raise WireError("ExtenderArgs.Pod.metadata must be an object")
    _, nodes_raw = _top(doc, "Nodes")
    _, names_raw = _top(doc, "NodeNames")
    nodes: list[dict[str, Any]] | None = None
    node_list_meta: Any = None
    names: list[str] = []
    if nodes_raw is not None:
        if not isinstance(nodes_raw, dict):
            raise WireError(
                f"ExtenderArgs.Nodes must be a v1 NodeList object or null, "
                f"got {type(nodes_raw).__name__}"
            )
        items = field(nodes_raw, "items")
        node_list_meta = field(nodes_raw, "metadata")
        if items is None:
            items = []
        if not isinstance(items, list):
            raise WireError("ExtenderArgs.Nodes.items must be a list of v1 Node objects")
        nodes = items
        for n, item in enumerate(items):
            name = field(field(item, "metadata"), "name")
            if not isinstance(name, str) or not name:
                raise WireError(
                    f"ExtenderArgs.Nodes.items[{n}].metadata.name is missing or not a string"
                )
            names.append(name)
    node_names: list[str] | None = None
    if names_raw is not None:
        if not isinstance(names_raw, list):
            raise WireError(
                f"ExtenderArgs.NodeNames must be a list of node names or null, "
                f"got {type(names_raw).__name__}"
            )
        if not set(map(type, names_raw)) <= {str}:  # one C-level pass over 5,000 names
            n, name = next((n, x) for n, x in enumerate(names_raw) if not isinstance(x, str))
            raise WireError(
                f"ExtenderArgs.NodeNames[{n}] must be a string, got {type(name).__name__}"
            )
        node_names = names_raw
        if nodes is None:
            names = list(names_raw)
    return ExtenderArgs(
        pod=pod, nodes=nodes, node_names=node_names, names=names, node_list_meta=node_list_meta
    )


def encode_filter(args: ExtenderArgs, d: FilterDecision) -> bytes:
    """ExtenderFilterResult in the request's mode (Nodes and NodeNames null on an error)."""
    nodes_out: Any = None
    names_out: list[str] | None = None
    if not d.error:
        if args.nodes is not None:
            meta = args.node_list_meta if isinstance(args.node_list_meta, dict) else {}
            nodes_out = {
                "metadata": meta,
                "items": [n for n, ok in zip(args.nodes, d.passed, strict=True) if ok],
            }
        if args.node_names is not None:
            names_out = [n for n, ok in zip(args.names, d.passed, strict=True) if ok]
    return dumps(
        {
            "Nodes": nodes_out,
            "NodeNames": names_out,
            "FailedNodes": dict(d.failed),
            "FailedAndUnresolvableNodes": dict(d.unresolvable),
            "Error": d.error,
        }
    )


def encode_prioritize(args: ExtenderArgs, d: PrioritizeDecision) -> bytes:
    """HostPriorityList: [{"Host": name, "Score": int}] in request order."""
    return dumps([{"Host": n, "Score": int(s)} for n, s in zip(args.names, d.scores, strict=True)])
