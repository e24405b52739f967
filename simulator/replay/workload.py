"""The arrival sequence of one replay and the FGD target workload distribution.

Arrival sequence (the FGD artifact's "workload tuning", ratio 1.3, `--shuffle-pod=true`): the
pod list is shuffled; if its total GPU request is below 130 % of the cluster's GPU capacity,
pods drawn uniformly at random *with replacement* from the list are appended until the next
draw would pass the target; if it is above, pods are removed at random until it fits. Pods
never leave. The stop test compares the running total plus the drawn pod's *per-GPU* share
with the target, exactly as the artifact does (`tuneUpPods`), so the last multi-GPU draw may
overshoot by a few GPUs; the arrived-demand axis is measured, not assumed, so this is harmless.

Target distribution (what FGD's expected fragmentation averages over): every distinct pod
shape (CPU, per-GPU share, GPU count, GPU-model constraint) in the *original* pod list,
weighted by how many pods have it; the most popular shapes are kept until they cover 95 % of
the pods (`podPopularityThreshold: 95`, CPU-only pods included) and the kept weights are
renormalised to sum to 1. Host memory is not part of a shape, as in the artifact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.replay.trace import PodList

__all__ = ["TUNE_RATIO", "TargetShapes", "target_shapes", "arrival_sequence"]

TUNE_RATIO = 1.3
POPULARITY_THRESHOLD = 0.95
NONZERO_CPU_MILLI = 100  # kube-scheduler's default request for a container that asks for none


@dataclass(frozen=True)
class TargetShapes:
    """Typical pod shapes as parallel arrays with their weights (sum 1)."""

    cpu_milli: np.ndarray  # int64
    gpu_milli: np.ndarray  # int64 (0 for CPU-only shapes)
    num_gpu: np.ndarray  # int64
    spec_id: np.ndarray  # int64, index into the pod list's specs
    weight: np.ndarray  # float64

    def __len__(self) -> int:
        return len(self.weight)


def target_shapes(pods: PodList, threshold: float = POPULARITY_THRESHOLD) -> TargetShapes:
    """Build FGD's target workload from the pod list (see module docstring)."""
    cpu = np.where(pods.cpu_milli > 0, pods.cpu_milli, NONZERO_CPU_MILLI)
    counts: dict[tuple[int, int, int, int], int] = {}
    for key in zip(
        cpu.tolist(),
        pods.gpu_milli.tolist(),
        pods.num_gpu.tolist(),
        pods.spec_id.tolist(),
        strict=True,
    ):
        counts[key] = counts.get(key, 0) + 1

    def spec_text(spec_id: int) -> str:
        return "|".join(pods.specs[spec_id])

    # Most popular first; equal counts: the larger shape first (the artifact's reversed order).
    ordered = sorted(
        counts.items(),
        key=lambda kv: (kv[1], kv[0][0], kv[0][1], kv[0][2], spec_text(kv[0][3])),
        reverse=True,
    )
    total = float(len(pods))
    kept: list[tuple[tuple[int, int, int, int], int]] = []
    cum = 0.0
    for key, n in ordered:
        if cum >= threshold * total:
            break
        kept.append((key, n))
        cum += n
    weights = np.array([n for _, n in kept], dtype=np.float64)
    weights /= weights.sum()
    keys = np.array([k for k, _ in kept], dtype=np.int64)
    return TargetShapes(
        cpu_milli=keys[:, 0].copy(),
        gpu_milli=keys[:, 1].copy(),
        num_gpu=keys[:, 2].copy(),
        spec_id=keys[:, 3].copy(),
        weight=weights,
    )


def arrival_sequence(
    pods: PodList, capacity_gpu_milli: int, rng: np.random.Generator, ratio: float = TUNE_RATIO
) -> np.ndarray:
    """Indices into `pods`, in arrival order, for one replay (see module docstring)."""
    n = len(pods)
    total_milli = pods.total_gpu_milli
    order = rng.permutation(n)
    target = ratio * float(capacity_gpu_milli)
    total = int(total_milli.sum())
    if total < target:
        extra: list[int] = []
        per_gpu = pods.gpu_milli
        while True:
            batch = rng.integers(0, n, size=256)
            stop = False
            for idx in batch.tolist():
                if total + int(per_gpu[idx]) > target:
                    stop = True
                    break
                total += int(total_milli[idx])
                extra.append(idx)
            if stop:
                break
        return np.concatenate([order, np.array(extra, dtype=np.int64)])
    if total > target:
        keep = order.tolist()
        while total > target:
            pos = int(rng.integers(0, len(keep)))
            total -= int(total_milli[keep.pop(pos)])
        return np.array(keep, dtype=np.int64)
    return order
