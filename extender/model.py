"""Frozen inputs of the pure fit and scoring code: what one GPU, one node and one pod are.

These are plain values, never modified in place, so the extender, the simulator and the
tests can share them. Units: GPU memory in MiB, CPU in milli-cores, time in seconds.
The cache (extender/cache.py) builds them from Kubernetes objects and signals; the
simulator builds them from the trace.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from kvspread.gpumem import free_mib

__all__ = ["GpuState", "NodeState", "PodShape", "SIGNALS_FRESH", "SIGNAL_STATES"]

SIGNALS_FRESH: Final = "fresh"
SIGNAL_STATES: Final = ("fresh", "stale", "missing", "invalid")


@dataclass(frozen=True, slots=True)
class GpuState:
    """One GPU: measured memory use and what kvspread pods have claimed on it (MiB).

    free = total - max(used, allocated) (docs/design.md section 4): a pod's claim counts even
    before its engine has allocated the memory, and measured use counts even when it
    exceeds the claims (processes outside kvspread).
    """

    total_mib: float
    used_mib: float = 0.0
    allocated_mib: float = 0.0
    util: float | None = None
    """Share of time a kernel ran (NVML utilization.gpu, 0..1); None when not measured."""
    pods: int | None = None
    """Pods on this GPU as far as the extender knows (kvspread pods from the signals, the
    ledger and predictions, plus one for another tenant's unexplained memory use); None
    when not tracked. The device plugin's GPU choice is predicted from it."""

    @property
    def free_mib(self) -> float:
        return float(free_mib(self.total_mib, self.used_mib, self.allocated_mib))

    def is_idle(self, idle_used_fraction: float) -> bool:
        """True when a whole-GPU instance can take this GPU: no claims, near-zero use."""
        return self.allocated_mib <= 0.0 and self.used_mib <= idle_used_fraction * self.total_mib


@dataclass(frozen=True, slots=True)
class NodeState:
    """What the extender knows about one node when it decides.

    `gpus` is empty when the node has no fresh GPU signals (then `signals` says why:
    stale, missing or invalid); signal-based terms are neutral for such a node and the
    filter passes it. `streams`, `image_token_share` and `p95_s` are None when not
    measured (never zero-filled). `model_replicas` counts kvspread pods per model label
    bound to the node plus recent placements from the ledger.
    """

    name: str
    gpus: tuple[GpuState, ...] = ()
    signals: str = SIGNALS_FRESH
    streams: float | None = None
    image_token_share: float | None = None
    p95_s: float | None = None
    pool: str | None = None
    nvlink: bool = False
    model_replicas: Mapping[str, int] = field(default_factory=dict)
    cpu_free_milli: float | None = None
    signals_ts: float | None = None
    """Measurement time of the signals (seconds since the epoch), when known."""
    last_gpus: int | None = None
    """Not fresh: how many GPUs the node's last (stale) document listed, None when there
    is none. What the filter fails a stale node by: a count or size it cannot have."""
    last_largest_mib: float | None = None
    """Not fresh: the largest GPU total of the last document (no GPU of the node is
    bigger)."""
    last_smallest_mib: float | None = None
    """Not fresh: the smallest GPU total of the last document (every GPU is this big)."""

    @property
    def fresh(self) -> bool:
        return self.signals == SIGNALS_FRESH and len(self.gpus) > 0


@dataclass(frozen=True, slots=True)
class PodShape:
    """The parts of a pod that placement depends on.

    `gpus` is the tensor-parallel degree (the `nvidia.com/gpu` limit; 0 for a pod that
    uses no GPU); `mem_per_gpu_mib` the `kvspread.io/gpu-memory` need on each GPU, or
    None for whole GPUs. `cpu_milli` is only used where a caller tracks CPU (the
    simulator; FGD counts a node without enough CPU as unable to host the shape).
    """

    gpus: int = 0
    mem_per_gpu_mib: float | None = None
    cpu_milli: float = 0.0
    model: str | None = None
    modality: str = "text"
    qos: str | None = None

    @property
    def key(self) -> tuple[int, float | None, float]:
        """Identity of the shape for the learned distribution (extender/shapes.py)."""
        return (self.gpus, self.mem_per_gpu_mib, self.cpu_milli)
