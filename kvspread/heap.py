"""Keep freed heap memory for reuse in long-running numpy servers (glibc malloc tuning).

Why: the extender allocates a few dozen arrays of 100 KB-10 MB per request and frees them
at its end. glibc's defaults hand blocks above the mmap threshold straight back to the
kernel and trim the top of the heap as soon as 2 x that threshold is free, so the next
request faults every page in again: at 5,000 nodes that was ~4.7 ms of system CPU per
names-only /prioritize (of ~21 ms), measured from /proc on the bench server. Fixed
thresholds (setting them also switches off glibc's dynamic adjustment) keep that memory in
the process: the cost is up to `trim_threshold` bytes of freed heap kept resident.

An operator's own `MALLOC_MMAP_THRESHOLD_` / `MALLOC_TRIM_THRESHOLD_` (glibc's environment
tunables) win: then nothing is changed. Other C libraries: a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["keep_freed_memory", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

MMAP_THRESHOLD = 16 << 20
"""Blocks below 16 MiB come from the heap (a 5,000-node request's largest is ~3 MiB)."""
TRIM_THRESHOLD = 64 << 20
"""Up to 64 MiB of free memory at the top of the heap stays with the process."""

_M_TRIM_THRESHOLD = -1  # glibc malloc.h
_M_MMAP_THRESHOLD = -3


def keep_freed_memory(
    mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD
) -> bool:
    """Set glibc's mmap and trim thresholds; True when both were set."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(
        mallopt(_M_MMAP_THRESHOLD, mmap_threshold) == 1
        and mallopt(_M_TRIM_THRESHOLD, trim_threshold) == 1
    )
