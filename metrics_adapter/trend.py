"""The SLO pressure's predictive term: the request rate a scale-up lead time ahead.

Why: a replica needs a pod start and an engine warm-up (45-140 s in the serving
simulation) before it serves, while the pressure's other terms (TTFT, TPOT, queue, KV
usage) rise only once requests already wait. The arrival rate rises first. This term
extrapolates it over that lead time and divides by what the replicas serve:

    slope     = (short rate - long rate) / ((long window - short window) / 2)
    predicted = min(short rate + slope x (lead + short window / 2), maxGrowth x short rate)
    term      = predicted / (replicas x capacity)

Both rates end now, so their windows' centres lie (long - short) / 2 apart; the
extrapolation runs from the short window's centre to `lead` past now. The term is left out
(no value, as a term without fresh data) when the rate does not rise by more than
`minRise` (relative): flat or falling traffic is the other terms' business, and a
scale-down is never asked for by a prediction. It is bounded: at most `maxGrowth` times the
current rate, and `lead` at most `MAX_LEAD_S`.

Off unless an `slo-pressure` rule has a `trend:` key (docs/adapter.md, "SLO pressure").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_GROWTH", "MAX_LEAD_S", "TERM_LABEL", "Trend", "predicted_rate", "trend_term"]

TERM_LABEL: Final = "trend"
"""`metricLabels.term` when this term sets the pressure."""
MAX_LEAD_S: Final = 600.0
"""The longest lead accepted: past 10 min a linear extrapolation of arrivals is a guess."""
MAX_GROWTH: Final = 10.0
"""The largest `maxGrowth` accepted."""


@dataclass(frozen=True)
class Trend:
    """The `trend:` key of an `slo-pressure` rule."""

    short: str
    """A `rate` rule: the current request rate (its window is the short one)."""
    long: str
    """A `rate` rule on the same requests over a longer window."""
    replicas: str
    """A rule whose value is the number of replicas serving (e.g. `last`, `combine: count`)."""
    lead_s: float = 120.0
    """How far ahead, seconds: a replica's start plus warm-up."""
    capacity: float = 2.0
    """Requests/s one replica serves at pressure 1 (per service: `trendCapacity`)."""
    max_growth: float = 2.0
    """The prediction is at most this times the short rate."""
    min_rise: float = 0.1
    """The short rate must exceed the long one by this fraction, or the term is left out."""


def predicted_rate(
    short_rate: float, long_rate: float, short_window_s: float, long_window_s: float,
    trend: Trend,
) -> float | None:  # fmt: skip
    """The rate `trend.lead_s` ahead, or None when the rate does not rise (module docstring)."""
    if long_window_s <= short_window_s or short_rate <= 0:
        return None
    if short_rate <= long_rate * (1.0 + trend.min_rise):
        return None
    slope = (short_rate - long_rate) / ((long_window_s - short_window_s) / 2.0)
    ahead = short_rate + slope * (trend.lead_s + short_window_s / 2.0)
    return min(ahead, trend.max_growth * short_rate)


def trend_term(predicted: float | None, replicas: float, capacity: float) -> float | None:
    """predicted / (replicas x capacity); None without a prediction or a serving replica."""
    if predicted is None or replicas < 1 or capacity <= 0:
        return None
    return predicted / (replicas * capacity)
