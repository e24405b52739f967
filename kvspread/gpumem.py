"""GPU memory arithmetic shared by the collector (what it publishes) and the extender
(what it scores): free memory per GPU and a node's fragmentation (docs/design.md section 4).

One definition each, written over numpy arrays so that the extender applies them to
thousands of nodes at once; the collector passes one node's GPUs. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["free_mib", "node_fragmentation", "node_fragmentation_of"]


def free_mib(total: ArrayLike, used: ArrayLike, allocated: ArrayLike = 0.0) -> np.ndarray:
    """free_g = total_g - max(used_g, allocated_g), never below 0.

    A pod's claim counts before its engine has allocated the memory; measured use counts
    even where it exceeds the claims (processes outside kvspread).
    """
    return np.maximum(np.subtract(total, np.maximum(used, allocated)), 0.0)


def node_fragmentation(free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rho, largest free extent) over the last axis of `free` (MiB per GPU).

    rho = 1 - max_g free_g / sum_g free_g: 0 when all free memory sits on one GPU, and 0
    when nothing is free; the largest free extent max_g free_g is the most memory one new
    single-GPU instance could get (0 without GPUs).
    """
    free = np.asarray(free, dtype=np.float64)
    if free.shape[-1] == 0:
        zero = np.zeros(free.shape[:-1])
        return zero, zero
    total = free.sum(axis=-1)
    largest = free.max(axis=-1)
    safe = np.where(total > 0, total, 1.0)
    rho = np.where(total > 0, 1.0 - largest / safe, 0.0)
    return rho, largest


def node_fragmentation_of(free: Sequence[float]) -> tuple[float, float]:
    """`node_fragmentation` of one node's GPUs, as Python floats."""
    rho, largest = node_fragmentation(np.asarray(free, dtype=np.float64).reshape(1, -1))
    return float(rho[0]), float(largest[0])
