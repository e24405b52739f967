"""Several target ports per pod: the data-parallel ranks of InferencePool v1.1.

An InferencePool's `spec.targetPorts` lists 1..8 ports (`{number: N}`, unique; GIE
api/v1/inferencepool_types.go: "Every port will be treated as a distinctive endpoint by
EPP, addressable as a 'podIP:portNumber' combination"), typically one per data-parallel rank
of an engine in the pod. Each port of a Ready pod is one endpoint `podIP:port`; with several
ports the endpoint of `targetPorts[i]` is named `namespace/pod-rank-i`, as llm-d's picker
names it (llm-d-router pkg/epp/datastore/datastore.go, createEndpointNamespacedName); with
one port it keeps the pod's name. llm-d's `llm-d.ai/active-ports` pod annotation (or GIE's
older `inference.networking.k8s.io/active-ports`), a comma-separated list, narrows a pod to
the ranks it serves now; numbers not among the pool's ports are ignored, as there.

The older `spec.targetPortNumber` (one port; v1alpha2) is read when `targetPorts` is absent.
More than MAX_TARGET_PORTS ports, a repeated port or one outside 1..65535 is refused with a
PortsError naming the field: the watcher reports it as the pool's problem (readiness off
with the reason), never a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "MAX_TARGET_PORTS",
    "ACTIVE_PORTS_ANNOTATIONS",
    "PortsError",
    "Rank",
    "target_ports",
    "pod_ranks",
    "rank_name",
    "llm_d_rank_name",
]

MAX_TARGET_PORTS: Final = 8
"""InferencePool v1's bound on `spec.targetPorts` (kubebuilder MaxItems=8)."""
ACTIVE_PORTS_ANNOTATIONS: Final = (
    "llm-d.ai/active-ports",
    "inference.networking.k8s.io/active-ports",
)
"""The pod annotations naming the ranks serving now, llm-d's name first."""


class PortsError(ValueError):
    """An InferencePool whose ports cannot be used; the message names the field."""


@dataclass(frozen=True)
class Rank:
    """One endpoint of a pod: rank `index` (its position in targetPorts) on `port`."""

    index: int
    port: int


def _port(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise PortsError(f"{where}: expected a port number 1..65535, got {value!r}")
    return value


def target_ports(spec: Mapping[str, Any]) -> list[int]:
    """The pool's target ports in order: `targetPorts[].number`, else `targetPortNumber`."""
    listed = spec.get("targetPorts")
    if listed is None:
        single = spec.get("targetPortNumber")
        if single is None:
            raise PortsError("spec.targetPorts: missing (and no spec.targetPortNumber)")
        return [_port(single, "spec.targetPortNumber")]
    if not isinstance(listed, list) or not listed:
        raise PortsError("spec.targetPorts: expected a list of 1..8 {number: port}")
    if len(listed) > MAX_TARGET_PORTS:
        raise PortsError(
            f"spec.targetPorts: {len(listed)} ports, at most {MAX_TARGET_PORTS} (InferencePool v1)"
        )
    out: list[int] = []
    for i, item in enumerate(listed):
        where = f"spec.targetPorts[{i}].number"
        number = _port(item.get("number") if isinstance(item, Mapping) else None, where)
        if number in out:
            raise PortsError(f"{where}: port {number} is listed twice (ports must be unique)")
        out.append(number)
    return out


def _active(annotations: Mapping[str, str], ports: list[int]) -> set[int] | None:
    """The ports the pod's active-ports annotation names, None without one."""
    for key in ACTIVE_PORTS_ANNOTATIONS:
        text = annotations.get(key)
        if text is not None:
            named = set()
            for part in text.split(","):
                part = part.strip()
                if part.isascii() and part.isdigit() and int(part) in ports:
                    named.add(int(part))
            return named
    return None


def pod_ranks(ports: list[int], annotations: Mapping[str, str] | None = None) -> list[Rank]:
    """A Ready pod's ranks: one per target port, less those its active-ports leaves out."""
    active = _active(annotations or {}, ports)
    return [Rank(i, p) for i, p in enumerate(ports) if active is None or p in active]


def llm_d_rank_name(pod: str, index: int) -> str:
    """llm-d's name of a pod's rank `index`: `pod-rank-i` (its metrics label every rank so)."""
    return f"{pod}-rank-{index}"


def rank_name(pod: str, rank: Rank, ports: int) -> str:
    """`pod-rank-i` when the pool has several ports, else the pod's own name."""
    return llm_d_rank_name(pod, rank.index) if ports > 1 else pod
