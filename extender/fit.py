"""The filter (docs/design.md section 5): can this node host the pod at all?

A node fails when the pod's GPU count cannot be met by GPUs whose free memory covers the
pod's per-GPU need (free_g >= need; for whole-GPU pods: idle GPUs), or, where CPU is
tracked (the simulator), when its free CPU is short. Where the device plugin picks the GPU
(`gpu_assignment: fewest-pods`, a one-GPU pod, pod counts tracked), the node fails unless
every GPU it may hand out qualifies. Nodes without fresh signals pass (missing monitoring
never blocks scheduling) unless their last document proves the pod impossible: fewer GPUs
than the pod asks for, or none (or not enough) of the size it needs; a node without any
document always passes. Pods that use no GPU always pass.

`fit_rows` is the one predicate: the filter (`fit_batch`) and prioritize
(`extender.scoring.candidate_gpus`) both take their `fits` from it, so a node /filter
passes is one /prioritize can score (issue 26, point 5).

Reasons are written for a person reading `kubectl describe pod`, e.g.
"kvspread: needs 2 GPUs with 24 GiB free each, node has 1 (largest free 10.5 GiB)".

`fit_batch` decides many nodes at once (numpy); `check_fit` is its one-row form.
"""

from __future__ import annotations

from collections.abc import Callable
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
    "fit_rows",
    "FitRows",
    "fewest_pods",
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


def fewest_pods(batch: NodeBatch) -> tuple[np.ndarray, np.ndarray]:
    """((N,) nodes whose pods per GPU are all tracked, (N, G) their GPUs with the fewest
    pods): where the NVIDIA device plugin puts a one-GPU pod (its distributed allocation
    hands out the GPU with the fewest allocated replicas first)."""
    gp = batch.pods
    tracked = ~np.isnan(gp)
    if not tracked.any():  # no node's pods tracked: nothing known (cand is read where known)
        return _ro(np.zeros(len(batch), dtype=bool)), _ro(np.zeros(gp.shape, dtype=bool))
    known = batch.fresh & batch.valid.any(axis=1) & (tracked | ~batch.valid).all(axis=1)
    gp_v = np.where(batch.valid & tracked, gp, np.inf)
    cand = batch.valid & (gp_v == gp_v.min(axis=1)[:, None])
    return _ro(known), _ro(cand)


def _ro(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


class FitRows(NamedTuple):
    """`fit_rows`: every array (N,) but `qual` (N, G)."""

    qual: np.ndarray
    """GPU slots that can take one of the pod's GPUs (only the device plugin's choice
    where it chooses)."""
    fits: np.ndarray
    """Nodes the pod fits on."""
    dp_ok: np.ndarray
    """False where the device plugin's choice does not qualify (True where it does not
    choose)."""
    impossible: np.ndarray
    """Not fresh, and the last document proves the pod cannot fit (GPU count or sizes)."""
    cpu_ok: np.ndarray


def proven_impossible(pod: PodShape, batch: NodeBatch) -> np.ndarray:
    """(N,) nodes without fresh signals whose last document shows fewer GPUs than the pod
    needs, or no GPU as large as its per-GPU need, or too few: a need above the smallest
    GPU leaves at most count - 1. Nodes with two or more sizes below the need are not
    resolved further (they pass: fail-open is the safe direction)."""
    n = len(batch)
    if pod.gpus <= 0 or n == 0:
        return np.zeros(n, dtype=bool)
    count = batch.last_gpus
    with np.errstate(invalid="ignore"):
        short = count < pod.gpus
        need = pod.mem_per_gpu_mib
        if need is not None:
            short |= batch.last_largest < need
            short |= (batch.last_smallest < need) & (count - 1 < pod.gpus)
    out: np.ndarray = ~batch.fresh & ~np.isnan(count) & short
    return out


def fit_rows(
    pod: PodShape,
    batch: NodeBatch,
    cfg: ScoringConfig,
    fewest: Callable[[NodeBatch], tuple[np.ndarray, np.ndarray]] = fewest_pods,
) -> FitRows:
    """The fit predicate, for the filter and prioritize alike (`fewest`: `fewest_pods`,
    or a memoised form of it)."""
    n = len(batch)
    cpu_ok = batch.cpu_free >= pod.cpu_milli
    if pod.gpus <= 0:
        qual = np.zeros_like(batch.valid)
        return FitRows(qual, cpu_ok.copy(), np.ones(n, dtype=bool), np.zeros(n, bool), cpu_ok)
    qual = qualifying_gpus(pod, batch, cfg)
    fits = cpu_ok & (~batch.fresh | (qual.sum(axis=1) >= pod.gpus))
    dp_ok = np.ones(n, dtype=bool)
    if cfg.gpu_assignment == "fewest-pods" and pod.gpus == 1 and n:
        known, cand = fewest(batch)
        if known.any():  # else the device plugin's choice is unknown on every node
            dp_ok = ~known | ~(cand & ~qual).any(axis=1)
            qual = np.where(known[:, None], qual & cand, qual)
            fits &= dp_ok
    impossible = proven_impossible(pod, batch)
    fits &= ~impossible
    return FitRows(qual, fits, dp_ok, impossible, cpu_ok)


def _stale_text(pod: PodShape, batch: NodeBatch, i: int) -> str:
    count = int(batch.last_gpus[i])
    largest = float(batch.last_largest[i])
    sizes = f"of at most {format_mib(largest)}" if np.isfinite(largest) else ""
    return (
        f"kvspread: needs {_need_text(pod)}, the node's last (stale) signals list "
        f"{count} GPU{'s' if count != 1 else ''} {sizes}".rstrip()
    )


def _device_plugin_text(pod: PodShape, batch: NodeBatch, i: int, qual_all: np.ndarray) -> str:
    known, cand = fewest_pods(batch.take([i]))
    bad = np.flatnonzero(cand[0] & ~qual_all[i]) if known[0] else np.zeros(0, dtype=np.intp)
    j = int(bad[0]) if len(bad) else 0
    return (
        f"kvspread: needs {_need_text(pod)}, but the device plugin hands out the GPU with "
        f"the fewest pods (GPU {j}: {format_mib(float(batch.free()[i, j]))} free)"
    )


def fit_batch(
    pod: PodShape, batch: NodeBatch, cfg: ScoringConfig, *, reasons: bool = True
) -> tuple[np.ndarray, dict[str, Failure]]:
    """Filter many nodes: (N,) bool of passing nodes and {failed name: Failure}."""
    rows = fit_rows(pod, batch, cfg)
    ok = rows.fits
    failed: dict[str, Failure] = {}
    if reasons and not ok.all():
        n = len(batch)
        largest = batch.free().max(axis=1) if n else np.zeros(0)
        qual_count = rows.qual.sum(axis=1)
        qual_all = qualifying_gpus(pod, batch, cfg) if pod.gpus > 0 else rows.qual
        for i in map(int, np.flatnonzero(~ok)):
            name = batch.names[i]
            if not rows.cpu_ok[i]:
                msg = fit_reason(pod, 0, 0.0, cpu_short=float(batch.cpu_free[i]))
                failed[name] = Failure(FilterReason.CPU, msg)
            elif rows.impossible[i]:
                failed[name] = Failure(FilterReason.GPU_MEMORY, _stale_text(pod, batch, i))
            elif not rows.dp_ok[i] and qual_all[i].sum() >= pod.gpus:
                msg = _device_plugin_text(pod, batch, int(i), qual_all)
                failed[name] = Failure(FilterReason.GPU_MEMORY, msg)
            else:
                msg = fit_reason(pod, int(qual_count[i]), float(largest[i]))
                failed[name] = Failure(FilterReason.GPU_MEMORY, msg)
    return ok, failed
