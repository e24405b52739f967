"""Progress of a batch of simulation runs, weighted by work, with elapsed time and an ETA.

Runs differ in cost (FGD's and kvspread's scoring passes take several times what a random
placement takes), so a count of runs misleads: with the slow policies last, "80 %" of the
placement runs came at 201 s of 389 s. Here each run has a kind (its policy, or its
placement x autoscaler x routing) and the work of a kind is learned as its runs finish: the
mean wall time a worker measured for it; a kind not seen yet counts as the mean of the kinds
seen. The share shown is the finished work over the finished plus the expected remaining
work, and the ETA is the elapsed time scaled by what remains of that share. Callers start
the runs interleaved (`interleaved`), so every kind is measured early.

On a terminal: one bar, redrawn; on any other stream (a log, a pipe): one line every 10 %.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TextIO

__all__ = ["WorkProgress", "interleaved"]


def interleaved(seeds: Sequence[int]) -> list[int]:
    """Indices of runs in the order to start them: the first seed of every kind, then the
    second, ... (`seeds[i]` is run i's seed), so each kind's cost is measured early."""
    rank = {s: r for r, s in enumerate(dict.fromkeys(seeds))}
    return sorted(range(len(seeds)), key=lambda i: (rank[seeds[i]], i))


class WorkProgress:
    """Finished and running work of runs of known kinds, drawn on `stream` (None: silent)."""

    def __init__(
        self,
        kinds: Sequence[str],
        stream: TextIO | None,
        label: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = len(kinds)
        self.done = 0
        self.stream = stream
        self.label = label
        self.clock = clock
        self.start = clock()
        self._remaining: Counter[str] = Counter(kinds)
        self._spent: dict[str, tuple[float, int]] = {}  # kind -> (seconds, runs)
        self._finished_s = 0.0
        self._running: tuple[str, float] | None = None  # (kind, fraction) of a serial run
        self._last = 0  # lines from 10 %
        isatty = getattr(stream, "isatty", None)
        self.tty = bool(isatty()) if callable(isatty) else False

    def _cost(self, kind: str) -> float:
        """Expected seconds of one run of `kind` (1.0 before any run finished)."""
        if kind in self._spent:
            seconds, runs = self._spent[kind]
            return seconds / runs
        if self._spent:
            return self._finished_s / self.done
        return 1.0

    def fraction(self) -> float:
        """Share of the work finished, 0..1."""
        if self.done == self.total:
            return 1.0
        done = self._finished_s if self._spent else 0.0
        ahead = sum(self._cost(k) * n for k, n in self._remaining.items())
        if self._running is not None:
            kind, part = self._running  # still counted in `ahead`, whole
            done += part * self._cost(kind)
            ahead -= part * self._cost(kind)
        return done / (done + ahead) if done + ahead > 0 else 0.0

    def running(self, kind: str, fraction: float) -> None:
        """A run of `kind` in this process is `fraction` through (serial runs report it)."""
        self._running = (kind, min(1.0, max(0.0, fraction)))
        self._draw()

    def finished(self, kind: str, seconds: float, note: str = "") -> None:
        """A run of `kind` finished after `seconds` of its own (measured where it ran)."""
        self.done += 1
        self._running = None
        self._remaining[kind] -= 1
        seconds = max(seconds, 1e-6)
        spent, runs = self._spent.get(kind, (0.0, 0))
        self._spent[kind] = (spent + seconds, runs + 1)
        self._finished_s += seconds
        self._draw(note)

    def line(self, note: str = "") -> str:
        """What the progress says now, without the bar."""
        frac = self.fraction()
        elapsed = self.clock() - self.start
        eta = elapsed / frac * (1.0 - frac) if frac > 0 else None
        eta_text = "?" if eta is None else f"{eta:.0f} s"
        text = (
            f"{self.label}: {int(frac * 100)}% of the work ({self.done}/{self.total} runs, "
            f"{elapsed:.0f} s elapsed, eta {eta_text})"
        )
        return f"{text} {note}".rstrip()

    def _draw(self, note: str = "") -> None:
        if self.stream is None:
            return
        pct = int(self.fraction() * 100)
        if not self.tty:
            step = pct // 10 * 10
            if step <= self._last:
                return
            self._last = step
            self.stream.write(self.line() + "\n")
        else:
            width = 30
            filled = width * pct // 100
            bar = "#" * filled + "-" * (width - filled)
            self.stream.write(f"\r[{bar}] {self.line(note)[:110]:<110}")
            if self.done == self.total:
                self.stream.write("\n")
        self.stream.flush()
