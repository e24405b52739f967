"""The one refusal message for a quantile whose bucket cannot bound it (docs/adapter.md,
"Coarse histograms"), shared by the OTLP and PromQL sources so that an HPA's
`ScalingActive` condition reads the same whichever backend computed the histogram."""

from __future__ import annotations

from collections.abc import Iterable

from metrics_adapter.errors import HistogramTooCoarse
from metrics_adapter.rules import Rule
from metrics_adapter.sli import THRESHOLD_REFUSAL
from metrics_adapter.values import MetricValue

__all__ = ["FIX", "common_labels", "describe", "not_a_bound", "too_coarse"]

FIX = (
    "record it with an OTel SDK View whose explicit bucket boundaries are the ones in "
    "docs/metrics.md (seconds: 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.12, 0.2, 0.25, 0.5, "
    "0.75, 1, 2.5, 5, 7.5, 10, 30, 60, 120), or with exponential histogram aggregation"
)


def common_labels(label_sets: Iterable[dict[str, str]]) -> dict[str, str]:
    """The labels (name and value) that every one of `label_sets` carries."""
    it = iter(label_sets)
    first = next(it, None)
    if first is None:
        return {}
    common = dict(first)
    for ls in it:
        for k in list(common):
            if ls.get(k) != common[k]:
                del common[k]
    return common


def describe(labels: dict[str, str]) -> str:
    """`{k=v, ...}`, sorted: how a refusal names the series it merged."""
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}"


def _shown(bounds: tuple[float, ...]) -> str:
    """The first 20 bounds as a refusal lists them."""
    return ", ".join(f"{b:g}" for b in bounds[:20]) + (", ..." if len(bounds) > 20 else "")


def not_a_bound(
    rule: Rule, series: str, n_series: int, bounds: tuple[float, ...] | None
) -> HistogramTooCoarse:
    """The refusal of an `over-ratio` share whose threshold is not one of the histogram's
    `bounds` (None: exponential buckets); `series` names what was merged."""
    assert rule.threshold is not None
    if bounds is None:
        has = "exponential buckets, whose bounds are powers of their base"
    else:
        has = f"the bounds [{_shown(bounds)}]"
    return HistogramTooCoarse(
        f"metric {rule.name!r}: refusing the share of {series} ({n_series} series) over "
        f"{rule.threshold:g}: the histogram has {has}, and {rule.threshold:g} is not one "
        "of them, so the share would be a guess inside a bucket. Fix: record it with an "
        f"OTel SDK View whose explicit bucket boundaries include {rule.threshold:g} (the "
        "collector's own, docs/metrics.md), or set the rule's threshold to one of its bounds",
        THRESHOLD_REFUSAL,
    )


def too_coarse(
    rule: Rule,
    series: str,
    n_series: int,
    bounds: tuple[float, ...],
    value: float,
    reason: str,
    lower: float,
    upper: float,
    labels: dict[str, str],
    timestamp: float,
) -> HistogramTooCoarse:
    """The refusal of `rule`'s quantile `value`, which lies in (lower, upper] of a histogram
    with `bounds`, for `reason` (one of `sli.REFUSALS`); `series` names what was merged,
    `labels` and `timestamp` are those the value would have been served with."""
    shown = _shown(bounds)
    if reason == "wide_bucket":
        why = (
            f"a bucket {(upper - lower) / lower:.2g} times as wide as its lower bound, "
            f"so the true value may be that many times smaller "
            f"(limit maxRelativeBucketWidth {rule.max_relative_bucket_width:g})"
        )
    elif reason == "overflow_bucket":
        why = "the +Inf bucket, which has no upper bound"
    else:
        why = "a bucket reaching down to 0, which bounds it only from above"
    assert rule.quantile is not None
    return HistogramTooCoarse(
        f"metric {rule.name!r}: refusing the {rule.quantile:g} quantile of {series} "
        f"({n_series} series): the estimate {value:g} lies in ({lower:g}, {upper:g}], {why}; "
        f"the histogram's bounds [{shown}] are too coarse for it. Fix: {FIX}",
        reason,
        MetricValue(rule.name, lower, timestamp, rule.window, labels),
        upper,
    )
