"""How many bytes of request bodies the picker holds: per request and over all requests.

Why: in FULL_DUPLEX_STREAMED mode the picker keeps a request's body until it is complete (the
choice reads it), so without a bound one 150 MB upload took the picker from 65 to 693 MB of
RSS, and with FailClose (GIE's default) an out-of-memory picker stops routing for everyone.
Over the per-request budget a request is refused with 413, over the total budget with 429
(retry later), and the bytes are given back as soon as the choice is made or the stream ends.
Given back to the operating system too: CPython frees large bodies with free(), but glibc keeps
freed heap pages unless asked (its mmap threshold grows to the largest freed block), so after
a large release the heap is trimmed (malloc_trim).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

__all__ = ["BodyBudget", "DEFAULT_MAX_BODY_BYTES", "DEFAULT_MAX_BODIES_BYTES"]

DEFAULT_MAX_BODY_BYTES = 64 << 20
"""Per request: several base64 images (OpenAI's API takes images up to 20 MB, 27 MB in base64)."""
DEFAULT_MAX_BODIES_BYTES = 256 << 20
"""All requests together: a quarter of the Deployment's 1 GiB memory limit, leaving room for
the copies a choice makes (the joined body, its parse)."""
_TRIM_AFTER = 16 << 20  # bytes given back since the last trim that make the next one worth it


_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameters
_M_ARENA_MAX = -8
_MMAP_THRESHOLD = 128 << 10  # glibc's initial value, held fixed
ARENA_MAX = 2
"""glibc malloc arenas: by default up to 8 per core, one taken by each thread that finds the
others locked, and memory freed in one arena serves only the threads using it. grpcio's
C-core threads receive each message into their arenas, so each arena's high-water mark adds
up in the RSS: a 300 MiB upload to the `grpcio` server peaked 89-182 MiB above rest with the
default, 81-100 with one arena (MALLOC_ARENA_MAX=1, behind Envoy, 8 MiB listener limit), and
with grpcio's window fixed (router/run.py) 91-100 with two, 82-89 with one. Python's own small
objects do not use malloc (pymalloc), so two arenas cost little contention. The environment's
MALLOC_ARENA_MAX, where set, wins."""


def _glibc(name: str) -> Callable[..., int] | None:
    """A glibc function, or None where the C library has none (musl, macOS). Looked up in
    the symbols the interpreter already has loaded (CDLL(None)), its C library among them:
    ctypes.util.find_library would import a module and run ldconfig at every start."""
    try:
        return getattr(ctypes.CDLL(None), name)  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


def _malloc_trim() -> Callable[[], None]:
    """malloc_trim(0); glibc's mmap threshold held at 128 KiB: body chunks (up to Envoy's
    1 MiB frames) then live in their own mappings, returned on free, instead of in a heap that
    the dynamic threshold (raised to the largest block freed) lets fragment; and at most
    ARENA_MAX arenas (set before the gRPC server's threads start)."""
    mallopt = _glibc("mallopt")
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
        if "MALLOC_ARENA_MAX" not in os.environ:  # the operator's own setting wins
            mallopt(_M_ARENA_MAX, ARENA_MAX)
    trim = _glibc("malloc_trim")

    def run() -> None:
        if trim is not None:
            trim(0)

    return run


class BodyBudget:
    """Counts the body bytes held; `take` says whether more fit. One per picker, used from
    one thread at a time (the gRPC server's event loop)."""

    def __init__(
        self, per_request: int = DEFAULT_MAX_BODY_BYTES, total: int = DEFAULT_MAX_BODIES_BYTES
    ) -> None:
        self.per_request = per_request
        self.total = total
        self.held = 0
        self.peak = 0
        self.refused_too_large = 0  # 413s
        self.refused_busy = 0  # 429s
        self._released = 0
        self._trim = _malloc_trim()

    def take(self, n: int) -> bool:
        """Hold n more bytes if the total budget has room."""
        if self.held + n > self.total:
            self.refused_busy += 1
            return False
        self.held += n
        self.peak = max(self.peak, self.held)
        return True

    def give(self, n: int) -> None:
        """Give back n held bytes; trims the C heap after a large release."""
        self.held -= n
        self._released += n
        if self._released >= _TRIM_AFTER:
            self._released = 0
            self._trim()
