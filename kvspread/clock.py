"""Injectable clocks: every component takes one so tests can pin time."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["Clock", "SystemClock", "FakeClock", "SYSTEM_CLOCK"]


class Clock(Protocol):
    """Wall time (seconds since the epoch) and a monotonic time for intervals."""

    def now(self) -> float: ...

    def monotonic(self) -> float: ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


@dataclass
class FakeClock:
    """A clock that moves only when told to (tests and the simulator)."""

    t: float = 1_800_000_000.0
    mono: float = field(default=1000.0)

    def now(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.t += seconds
        self.mono += seconds


SYSTEM_CLOCK = SystemClock()
