"""Reading the Kubernetes objects the extender needs: a Pod into a `PodInfo` (its
`PodShape` and identity), a Node into a `NodeInfo` (labels, allocatable GPUs and the
raw signals annotation). Pure functions on the JSON dicts; never raise on odd input:
a pod whose kvspread labels or annotations are invalid gets `error` set, a message
that names the field and the accepted format (docs/design.md section 2).

Field lookups accept keys in any letter case (as Go's encoding/json does when
kube-scheduler or the API server decodes them); the exact key is tried first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

from extender.config import MIB
from extender.model import PodShape
from kvspread import names
from kvspread.quantity import QUANTITY_FORMAT_HELP, QuantityError, parse_quantity
from kvspread.settings import quoted

__all__ = [
    "PodInfo",
    "NodeInfo",
    "parse_pod",
    "parse_node",
    "node_info",
    "field",
    "TERMINAL_PHASES",
]

TERMINAL_PHASES = ("Succeeded", "Failed")


_ABSENT: Any = object()


def field(obj: Any, key: str) -> Any:
    """obj[key] with Go-style case-insensitive matching; None when absent or not a dict."""
    if not isinstance(obj, dict):
        return None
    value = obj.get(key, _ABSENT)
    if value is not _ABSENT:
        return value
    low = key.lower()
    for k, v in obj.items():
        if isinstance(k, str) and k.lower() == low:
            return v
    return None


def _str_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A pod as the extender sees it. `key` is "namespace/name"."""

    namespace: str
    name: str
    uid: str
    node_name: str
    phase: str
    shape: PodShape
    error: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def active(self) -> bool:
        """Holds its GPUs: bound and not finished."""
        return bool(self.node_name) and self.phase not in TERMINAL_PHASES


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node's labels and signals annotation as read from the Node object."""

    name: str
    pool: str | None
    nvlink: bool
    signals_annotation: str | None
    gpu_allocatable: int | None


def _gpu_count(value: Any, where: str) -> int:
    if value is None:
        return 0
    try:
        count = _whole_gpus(value)
    except TypeError:  # unhashable (a list or an object): not a quantity either
        count = _read_gpus(value)
    if count is None:
        raise ValueError(f"{where} {quoted(value)} is not a whole number of GPUs")
    return count


def _read_gpus(value: Any) -> int | None:
    """A GPU count quantity as an int; None when it is not a whole number >= 0."""
    try:
        q = parse_quantity(value)
    except QuantityError:
        return None
    if q < 0 or q != q.to_integral_value():
        return None
    return int(q)


_whole_gpus = lru_cache(maxsize=1024, typed=True)(_read_gpus)
"""`_read_gpus` memoised by value and type (every pod of a Deployment says "1"; typed, so
True is not taken for 1)."""


@lru_cache(maxsize=1024)
def _gpu_memory_mib(text: str) -> float | None:
    """The `kvspread.io/gpu-memory` annotation in MiB; None when it is not a quantity
    greater than 0 (memoised: the pods of a Deployment carry the same text)."""
    try:
        q = parse_quantity(text)
    except QuantityError:
        return None
    if q <= 0:
        return None
    return float(q / Decimal(MIB))


def _container_gpus(containers: Any, where: str) -> list[int]:
    out: list[int] = []
    if not isinstance(containers, list):
        return out
    for n, c in enumerate(containers):
        res = field(c, "resources")
        limits = field(res, "limits")
        requests = field(res, "requests")
        value = field(limits, names.RESOURCE_GPU)
        if value is None:
            value = field(requests, names.RESOURCE_GPU)
        out.append(_gpu_count(value, f"{where}[{n}] {names.RESOURCE_GPU} limit"))
    return out


def parse_pod(pod: Any) -> PodInfo:
    """Read a v1 Pod dict. Never raises; problems with kvspread fields go to `error`."""
    meta = field(pod, "metadata")
    spec = field(pod, "spec")
    status = field(pod, "status")
    ns = field(meta, "namespace")
    name = field(meta, "name")
    uid = field(meta, "uid")
    node_name = field(spec, "nodeName")
    phase = field(status, "phase")
    labels = _str_map(field(meta, "labels"))
    annotations = _str_map(field(meta, "annotations"))
    errors: list[str] = []
    try:
        main = _container_gpus(field(spec, "containers"), "container")
        init = _container_gpus(field(spec, "initContainers"), "init container")
        gpus = max(sum(main), max(init, default=0))
    except ValueError as exc:
        errors.append(str(exc))
        gpus = 0
    mem: float | None = None
    raw_mem = annotations.get(names.ANNOTATION_GPU_MEMORY)
    if raw_mem is not None:
        mem = _gpu_memory_mib(raw_mem)
        if mem is None:
            errors.append(
                f"annotation {names.ANNOTATION_GPU_MEMORY}={quoted(raw_mem)} is invalid: expected "
                f"{QUANTITY_FORMAT_HELP} (greater than 0), the GPU memory needed on each GPU"
            )
        if mem is not None and gpus == 0:
            # The annotation says the pod uses GPU memory; one GPU unless the limit says more.
            gpus = 1
    modality = labels.get(names.LABEL_MODALITY, "text")
    if modality not in names.MODALITIES:
        errors.append(
            f"label {names.LABEL_MODALITY}={quoted(modality)} is invalid: expected one of "
            f"{', '.join(names.MODALITIES)}"
        )
        modality = "text"
    qos = labels.get(names.LABEL_QOS)
    if qos is not None and qos not in names.QOS_CLASSES:
        errors.append(
            f"label {names.LABEL_QOS}={quoted(qos)} is invalid: expected one of "
            f"{', '.join(names.QOS_CLASSES)}"
        )
        qos = None
    shape = PodShape(
        gpus=gpus,
        mem_per_gpu_mib=mem,
        model=labels.get(names.LABEL_MODEL) or None,
        modality=modality,
        qos=qos,
    )
    return PodInfo(
        namespace=ns if isinstance(ns, str) and ns else "default",
        name=name if isinstance(name, str) else "",
        uid=uid if isinstance(uid, str) else "",
        node_name=node_name if isinstance(node_name, str) else "",
        phase=phase if isinstance(phase, str) else "",
        shape=shape,
        error="; ".join(errors),
    )


def parse_node(node: Any) -> NodeInfo:
    """Read a v1 Node dict. Never raises; the name is "" when missing."""
    meta = field(node, "metadata")
    name = field(meta, "name")
    return node_info(
        name if isinstance(name, str) else "",
        _str_map(field(meta, "labels")),
        _str_map(field(meta, "annotations")),
        field(field(node, "status"), "allocatable"),
    )


def node_info(
    name: str, labels: Mapping[str, str], annotations: Mapping[str, str], allocatable: Any
) -> NodeInfo:
    """The NodeInfo of a node's already extracted fields (`allocatable`: the status map,
    any JSON value; the GPU count is None when it is not a whole number)."""
    pool = labels.get(names.LABEL_POOL)
    try:
        gpu_alloc: int | None = _gpu_count(field(allocatable, names.RESOURCE_GPU), "allocatable")
    except ValueError:
        gpu_alloc = None
    return NodeInfo(
        name=name,
        pool=pool if pool in names.POOLS else None,
        nvlink=labels.get(names.LABEL_NVLINK, "").lower() == "true",
        signals_annotation=annotations.get(names.ANNOTATION_SIGNALS),
        gpu_allocatable=gpu_alloc,
    )
