"""The SLO pressure's step rule for latency terms: ask for what more replicas can change.

Why: `desired = ceil(replicas x pressure)` assumes a term falls as 1 / replicas. Queue depth
per replica and KV usage do; a latency percentile often does not. A TPOT p95 has a floor
that no replica count removes (the prefills that share every batch: in the serving
simulation vision's TPOT p95 hardly fell with more replicas), so a proportional TPOT term
near 1 asks for replicas it cannot use and, through the ceil, never lets one go. A latency
term listed under `step:` therefore says only which way to move, by a bounded amount:

    ratio = value / target
    ratio > 1          -> min(ratio, max((n + pods) / n, minRatio))   over target: at most
                          `pods` replicas more (n: the replicas serving); `minRatio` keeps
                          the step above the HPA's tolerance (0.1) at large n
    hold <= ratio <= 1 -> 1                                          near target: keep
    ratio < hold       -> left out (no value)                        the other terms (queue,
                          KV usage, proportional) say how many replicas are needed

The proposal `ceil(ready x step)` counts ready replicas, so while the added replica is still
starting the step asks for no more: one replica at a time, each once it serves.

`hold` may differ per term: a TPOT with a floor near its target is better left out below
1 (hold 1), while a TTFT, which queueing sets and replicas remove, keeps a margin.

Off unless an `slo-pressure` rule has a `step:` key (docs/adapter.md, "SLO pressure").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_STEP_PODS", "PODS", "MIN_RATIO", "HOLD", "Step", "step_value"]

MAX_STEP_PODS: Final = 10
"""The largest `pods` accepted: a bigger step is the proportional rule again."""
PODS: Final = 1
"""Default `pods`: one replica more per sync, each once it serves."""
MIN_RATIO: Final = 1.12
"""Default `minRatio`: above 1 + the HPA's tolerance (0.1), so a step is never ignored."""
HOLD: Final = 0.8
"""Default `hold`."""


@dataclass(frozen=True)
class Step:
    """The `step:` key of an `slo-pressure` rule."""

    terms: tuple[str, ...]
    """The terms (rule names) that act by a step instead of proportionally."""
    replicas: str
    """A rule whose value is the number of replicas serving (`last`, `combine: count`)."""
    pods: int = PODS
    """Over target: at most this many replicas more per HPA sync."""
    min_ratio: float = MIN_RATIO
    """The step's smallest ratio over target; above 1 + the HPA's tolerance (0.1)."""
    hold: float = HOLD
    """From this fraction of the target up to the target the term keeps the replicas (1)."""
    holds: tuple[tuple[str, float], ...] = ()
    """(term, its own hold), replacing `hold` for that term."""

    def hold_for(self, term: str | None) -> float:
        """`term`'s hold: its own, else the step's."""
        return dict(self.holds).get(term or "", self.hold)


def step_value(
    ratio: float, replicas: float | None, step: Step, term: str | None = None
) -> float | None:
    """`term`'s pressure for `ratio` = value / target (module docstring); None: left out.

    `replicas` None or below 1 (no replica counted) is taken as 1. The step is rounded down
    to a thousandth, the HPA's milli-units, so that ceil(n x step) is n + pods, not more."""
    if ratio < step.hold_for(term):
        return None
    if ratio <= 1.0:
        return 1.0
    n = max(1.0, replicas or 0.0)
    bound = max((n + step.pods) / n, step.min_ratio)
    return min(ratio, math.floor(bound * 1000.0) / 1000.0)
