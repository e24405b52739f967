"""The SLO pressure's scale-down guard: never ask for a replica count that just missed the SLO.

Why: `desired = ceil(replicas x pressure)` reads a latency ratio as if latency fell as
1 / replicas. A TPOT p95 does not: with little traffic it sits at its floor (in the serving
simulation vision's TPOT p95 read 24 ms of a 50 ms target, pressure 0.49, at 2 replicas),
the HPA asks for 1 replica, and at 1 replica the p95 is 60-70 ms (pressure 1.2-1.4), so it
asks for 2 again: a 2 -> 1 -> 2 cycle every few minutes, each paying a 45-140 s start and
the misses while it runs. Kubernetes' scale-down stabilisation window (300 s) only delays
each cycle. The guard remembers what the pressure itself showed:

    a violation: pressure > 1 with n replicas serving at request rate r > 0;
                 it says one replica cannot serve r / n requests/s within the SLO
    a count k < n (serving) is refused while some violation (n_v, r_v) within `window`
                 has k <= n_v and rate / k >= fraction x r_v / n_v
                 (fewer replicas at the same or a higher rate per replica than one that
                 missed the SLO; `fraction` < 1 lets a fallen rate scale down)
    served = max(pressure, (k' - 1/2) / n), k' the least count at or over
                 ceil(n x pressure) that is not refused (so the HPA's ceil(n x served) is k')

The window's count: a pressure is a percentile over a window (1 min by default), so just
after a scale-up it still holds the latencies the fewer replicas served. A violation is
therefore kept at the least serving count the guard's own reads of that selector saw within
the pressure's window, not at the count now: a p95 over 1 read as 2 replicas became ready,
over a minute in which 1 served, says 1 is too few, not 2; kept at 2 it would refuse 2 and
hold a third replica for `window` (on 16 simulated shared nodes the window count gave back
0.16 GPU-h in half an hour; docs/evaluation.md, "The guard's window count"). At most
`MAX_COUNTS` counts are kept per selector.

The guard only holds replicas: it never serves more than (n - 1/2) / n < 1 of its own, so it
never asks for a scale-up; what scales up is the other terms. A violation without arrivals
(r = 0) says nothing of a rate per replica and is not kept. The memory is bounded: at most
`MAX_KEYS` selectors (least recently read evicted) and, per selector, the violations no
newer one covers (a newer violation at as many or more replicas and as low or a lower rate
per replica refuses every count an older one does), at most `MAX_VIOLATIONS`.

Each adapter replica keeps its own memory from the reads it answers; the collector pushes
the same series to every replica, so the pressures agree, but a violation only one replica
read is known to that one alone (docs/adapter.md, "SLO pressure").

On in the default rules (`guard:` in `kvspread_slo_pressure`); measured in
docs/evaluation.md, "The scale-down guard".
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Final

__all__ = [
    "FRACTION",
    "MAX_COUNTS",
    "MAX_KEYS",
    "MAX_VIOLATIONS",
    "MAX_WINDOW_S",
    "TERM_LABEL",
    "WINDOW_S",
    "Guard",
    "GuardMemory",
    "guarded",
]

TERM_LABEL: Final = "guard"
"""`metricLabels.term` when the guard set the served value."""
WINDOW_S: Final = 1800.0
"""Default `window`: how long a violation refuses the counts under it."""
MAX_WINDOW_S: Final = 86400.0
"""The longest `window` accepted (a day)."""
FRACTION: Final = 0.8
"""Default `fraction`: a count is allowed again once the rate per replica it would carry
falls under 0.8 x the one that missed the SLO."""
MAX_KEYS: Final = 1000
"""Selectors remembered per pressure rule (least recently read evicted)."""
MAX_VIOLATIONS: Final = 64
"""Violations kept per selector (oldest dropped past it)."""
MAX_COUNTS: Final = 64
"""Replica counts kept per selector for the window's count (a read each 15 s over a 10 min
window is 40; only the counts that can still be a window's least are kept)."""


@dataclass(frozen=True)
class Guard:
    """The `guard:` key of an `slo-pressure` rule."""

    replicas: str
    """A rule whose value is the number of replicas serving (`last`, `combine: count`)."""
    rate: str
    """A rule whose value is the request rate the replicas serve (requests/s)."""
    window_s: float = WINDOW_S
    """How long a violation refuses the counts under it, seconds."""
    fraction: float = FRACTION
    """In (0, 1]: a count is allowed once its rate per replica is under this x the violation's."""


Violation = tuple[float, float, float]
"""(time, replicas serving, requests/s per replica) at a pressure over 1."""


def refused(k: int, rate: float, violations: list[Violation], fraction: float) -> bool:
    """Whether `k` replicas at `rate` carry as much per replica as one that missed the SLO."""
    return any(k <= n and rate / k >= fraction * per for _, n, per in violations)


def guarded(
    pressure: float, replicas: float, rate: float, violations: list[Violation], fraction: float
) -> float | None:
    """The value that holds the replicas a remembered violation refuses to let go, or None
    where the pressure's own proposal is not refused (module docstring)."""
    if not (math.isfinite(replicas) and math.isfinite(pressure)):
        return None
    n = math.floor(replicas)
    if n < 2:
        return None
    k = max(1, math.ceil(n * pressure))
    start = k
    while k < n and refused(k, rate, violations, fraction):
        k += 1
    if k == start:
        return None
    return (k - 0.5) / n


class _Entry:
    """One selector's memory: its violations and the replica counts its recent reads saw."""

    __slots__ = ("counts", "violations")

    def __init__(self) -> None:
        self.violations: list[Violation] = []
        self.counts: deque[tuple[float, float]] = deque()
        """(time, serving count), the counts increasing from oldest to newest: a count
        with a smaller or equal one after it is never the least of a window again."""


class GuardMemory:
    """Violations and recent serving counts per selector, bounded (module docstring);
    thread-safe."""

    def __init__(
        self,
        max_keys: int = MAX_KEYS,
        max_violations: int = MAX_VIOLATIONS,
        max_counts: int = MAX_COUNTS,
    ) -> None:
        self.max_keys = max_keys
        self.max_violations = max_violations
        self.max_counts = max_counts
        self._by_key: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._by_key)

    def _entry(self, key: str) -> _Entry:
        """`key`'s entry, made (evicting the least recently read past `max_keys`) and
        marked recently read; under the lock."""
        held = self._by_key.get(key)
        if held is None:
            held = self._by_key[key] = _Entry()
            while len(self._by_key) > self.max_keys:
                self._by_key.popitem(last=False)
        self._by_key.move_to_end(key)
        return held

    def violations(self, key: str, now: float, window_s: float) -> list[Violation]:
        """`key`'s violations within `window_s` of `now` (a copy); marks `key` recently read."""
        with self._lock:
            held = self._by_key.get(key)
            if held is None:
                return []
            held.violations[:] = [v for v in held.violations if now - v[0] <= window_s]
            self._by_key.move_to_end(key)
            return list(held.violations)

    def least(self, key: str, now: float, replicas: float, lag_s: float) -> float:
        """Notes `replicas` serving at `now` and returns the least count noted for `key`
        within `lag_s` before it: the count a pressure computed over that window was served
        by at its fewest (module docstring, "the window's count"). A non-finite count is
        returned as it is and not noted."""
        if not math.isfinite(replicas):
            return replicas
        with self._lock:
            counts = self._entry(key).counts
            while counts and counts[-1][1] >= replicas:
                counts.pop()
            counts.append((now, replicas))
            while counts and now - counts[0][0] > lag_s:
                counts.popleft()
            while len(counts) > self.max_counts:
                counts.popleft()
            return counts[0][1] if counts else replicas

    def record(self, key: str, now: float, replicas: float, rate: float) -> bool:
        """A pressure over 1 with `replicas` serving at `rate` requests/s; False (ignored)
        without both (no replica and no arrivals say nothing of a rate per replica)."""
        if not math.isfinite(replicas):
            return False
        n = math.floor(replicas)
        if n < 1 or not rate > 0 or not math.isfinite(rate):
            return False
        per = rate / n
        with self._lock:
            held = self._entry(key).violations
            # a newer violation at >= n replicas and <= the rate per replica covers an older
            held[:] = [v for v in held if not (v[1] <= n and v[2] >= per)]
            held.append((now, float(n), per))
            del held[: max(0, len(held) - self.max_violations)]
        return True
