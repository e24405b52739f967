"""kube-scheduler's two resource score plugins, vectorised over nodes: the one copy that
the trace replay (`kvspread-k8s`) and the serving simulation (`kube-default`) both use.

- NodeResourcesFit, strategy LeastAllocated, CPU and memory at weight 1: the mean over
  the two of (allocatable - requested) x 100 / allocatable, in integers, 0 once a resource
  is over-requested.
- NodeResourcesBalancedAllocation: int((1 - std of the requested fractions of CPU and
  memory) x 100), fractions capped at 1.

`requested` always includes the incoming pod. Any unit serves as long as requested and
allocatable agree (milli-CPU and MiB in the replay, vCPU and GiB in the serving simulation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["MAX_NODE_SCORE", "Requested", "least_allocated", "balanced_allocation"]

MAX_NODE_SCORE = 100
"""kube-scheduler's framework.MaxNodeScore: every score plugin answers 0..100."""


@dataclass(frozen=True)
class Requested:
    """Per node: CPU and memory requested with the incoming pod, and allocatable."""

    cpu: np.ndarray
    mem: np.ndarray
    cpu_cap: np.ndarray | float
    mem_cap: np.ndarray | float


def least_allocated(r: Requested) -> np.ndarray:
    """NodeResourcesFit with the LeastAllocated strategy (module docstring)."""
    cpu_s = np.where(r.cpu > r.cpu_cap, 0, (r.cpu_cap - r.cpu) * MAX_NODE_SCORE // r.cpu_cap)
    mem_s = np.where(r.mem > r.mem_cap, 0, (r.mem_cap - r.mem) * MAX_NODE_SCORE // r.mem_cap)
    score: np.ndarray = (cpu_s + mem_s) // 2
    return score


def balanced_allocation(r: Requested) -> np.ndarray:
    """NodeResourcesBalancedAllocation (module docstring); with two resources the standard
    deviation is half their difference."""
    cpu_f = np.minimum(r.cpu / r.cpu_cap, 1.0)
    mem_f = np.minimum(r.mem / r.mem_cap, 1.0)
    std = np.abs(cpu_f - mem_f) / 2.0
    score: np.ndarray = ((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)
    return score
