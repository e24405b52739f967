"""The filter (docs/design.md section 5): can this node host the pod at all?

A node fails when the pod's GPU count cannot be met by GPUs whose free memory covers the
pod's per-GPU need (free_g >= need; for whole-GPU pods: idle GPUs), or, where CPU is
tracked (the simulator), when its free CPU is short. Nodes without fresh signals pass:
missing monitoring never blocks scheduling. Pods that use no GPU always pass.

Reasons are written for a person reading `kubectl describe pod`, e.g.
"kvspread: needs 2 GPUs with 24 GiB free each, node has 1 (largest free 10.5 GiB)".

`fit_batch` decides many nodes at once (numpy); `check_fit` is its one-row form.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

import numpy as np

from extender.batch import NodeBatch
from extender.config import ScoringConfig
from extender.model import NodeState, PodShape

__all__ = [
    "FilterReason",
    "Failure",
    "FitResult",
    "check_fit",
    "fit_batch",
    "qualifying_gpus",
    "exclude_stale",
    "format_mib",
    "fit_reason",
]


class FilterReason(StrEnum):
    """Why the filter failed a node; the value is the `reason` label of the metric."""

    GPU_MEMORY = "gpu_memory"
    """Not enough GPUs with the pod's memory free (or idle, for whole-GPU pods)."""
    CPU = "cpu"
    """Not enough free CPU (where CPU is tracked)."""
    INVALID_POD = "invalid_pod"
    """The pod's own kvspread labels or annotations are invalid (every node fails)."""
    STALE_SIGNALS = "stale_signals"
    """The node's signals are older than `signals.exclude_after_s` (GPU pods only)."""


class Failure(NamedTuple):
    """One failed node: the kind (for metrics) and the message (for kubectl describe)."""

    reason: FilterReason
    message: str


@dataclass(frozen=True, slots=True)
class FitResult:
    fits: bool
    reason: str = ""


def format_mib(mib: float) -> str:
    """Human-sized memory: '24 GiB', '10.5 GiB', '512 MiB'."""
    if mib >= 1024:
        gib = mib / 1024
        return f"{gib:.0f} GiB" if abs(gib - round(gib)) < 0.05 else f"{gib:.1f} GiB"
    return f"{mib:.0f} MiB"


def _need_text(pod: PodShape) -> str:
    gpus = f"{pod.gpus} GPU" + ("s" if pod.gpus != 1 else "")
    if pod.mem_per_gpu_mib is None:
        return f"{gpus} that are entirely free"
    each = " each" if pod.gpus != 1 else ""
    return f"{gpus} with {format_mib(pod.mem_per_gpu_mib)} free{each}"


def fit_reason(
    pod: PodShape, qualifying: int, largest_free_mib: float, cpu_short: float | None = None
) -> str:
    """The FailedNodes message for a node that cannot host the pod."""
    if cpu_short is not None:
        return f"kvspread: needs {pod.cpu_milli:.0f}m CPU, node has {cpu_short:.0f}m free"
    return (
        f"kvspread: needs {_need_text(pod)}, node has {qualifying} "
        f"(largest free {format_mib(largest_free_mib)} on one GPU)"
    )


def check_fit(pod: PodShape, node: NodeState, cfg: ScoringConfig) -> FitResult:
    """Filter one node (a one-row `fit_batch`). Never raises for any NodeState/PodShape."""
    ok, failed = fit_batch(pod, NodeBatch.from_states([node]), cfg)
    failure = failed.get(node.name)
    return FitResult(bool(ok[0]), failure.message if failure else "")


def exclude_stale(
    pod: PodShape, batch: NodeBatch, now: float, limit_s: float | None
) -> tuple[np.ndarray, dict[str, Failure]]:
    """(N,) nodes to fail because their signals are older than `limit_s`, with reasons.

    Only GPU pods, and only nodes whose signals have a known age (a stale document);
    nodes without any document (no collector) are never excluded: they still rank below
    every fresh node that fits (extender/scoring.py)."""
    n = len(batch)
    if limit_s is None or pod.gpus <= 0 or n == 0:
        return np.zeros(n, dtype=bool), {}
    age = now - batch.sig_ts
    with np.errstate(invalid="ignore"):
        old = ~batch.fresh & (age > limit_s)
    failed = {
        batch.names[i]: Failure(
            FilterReason.STALE_SIGNALS,
            f"kvspread: node signals are {age[i]:.0f}s old "
            f"(signals.exclude_after_s is {limit_s:g}s): is the collector running?",
        )
        for i in np.flatnonzero(old)
    }
    return old, failed


def qualifying_gpus(pod: PodShape, batch: NodeBatch, cfg: ScoringConfig) -> np.ndarray:
    """(N, G) bool: GPU slots that can take one of the pod's GPUs."""
    if pod.mem_per_gpu_mib is None:
        return batch.idle(cfg.idle_used_fraction)
    return batch.valid & (batch.free() >= pod.mem_per_gpu_mib)


def fit_batch(
    pod: PodShape, batch: NodeBatch, cfg: ScoringConfig, *, reasons: bool = True
) -> tuple[np.ndarray, dict[str, Failure]]:
    """Filter many nodes: (N,) bool of passing nodes and {failed name: Failure}."""
    n = len(batch)
    cpu_ok = batch.cpu_free >= pod.cpu_milli
    if pod.gpus <= 0:
        ok = cpu_ok.copy()
        qual_count = np.zeros(n, dtype=np.int64)
    else:
        qual_count = qualifying_gpus(pod, batch, cfg).sum(axis=1)
        ok = cpu_ok & (~batch.fresh | (qual_count >= pod.gpus))
    failed: dict[str, Failure] = {}
    if reasons and not ok.all():
        largest = batch.free().max(axis=1) if n else np.zeros(0)
        for i in np.flatnonzero(~ok):
            name = batch.names[i]
            if not cpu_ok[i]:
                msg = fit_reason(pod, 0, 0.0, cpu_short=float(batch.cpu_free[i]))
                failed[name] = Failure(FilterReason.CPU, msg)
            else:
                msg = fit_reason(pod, int(qual_count[i]), float(largest[i]))
                failed[name] = Failure(FilterReason.GPU_MEMORY, msg)
    return ok, failed
