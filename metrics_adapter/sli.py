"""Pure SLI math: quantiles from histograms, rates from counters, ratios, good-request rates.

Everything here takes plain numbers (tuples, small frozen dataclasses) and returns plain
numbers, so that the adapter's sources, the serving simulator and the tests all compute
an SLI the same way. Nothing here does I/O, reads a clock or keeps state.

Conventions
-----------
- Time is in seconds (float). A *sample* is a ``(t, value)`` pair.
- An explicit-bucket histogram is OTel-shaped: ``bounds`` are the finite upper bounds
  b_0 < b_1 < ... < b_{n-1} and ``counts`` has n+1 non-cumulative entries, bucket i
  holding observations in (b_{i-1}, b_i] and the last one the (b_{n-1}, +Inf] overflow.
  Prometheus-shaped cumulative ``le`` buckets go through `bucket_quantile` directly.
- Functions return ``math.nan`` where Prometheus would (no observations, q is NaN), and
  ``None`` where a value simply does not exist yet (fewer than two samples for a rate, a
  zero denominator for a ratio). Callers must not serve either.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal, TypeVar

__all__ = [
    "Sample",
    "ExplicitHistogram",
    "ExponentialHistogram",
    "Extrapolation",
    "bucket_quantile",
    "histogram_quantile",
    "merge_explicit",
    "quantile_error_bound",
    "quantile_bucket",
    "quantile_refusal",
    "REFUSALS",
    "QUANTILE_REFUSALS",
    "THRESHOLD_REFUSAL",
    "count_below",
    "is_bound",
    "share_above",
    "exponential_quantile",
    "exponential_downscale",
    "increase",
    "rate",
    "ratio",
    "histogram_delta",
    "exponential_delta",
    "exponential_add",
    "histogram_increase",
    "exponential_increase",
    "good_rate",
    "extrapolation_factor",
]

Sample = tuple[float, float]
"""(time in seconds, value)."""

Extrapolation = Literal["prometheus", "none"]
"""How `increase`/`rate` treat the window edges: "prometheus" extrapolates the sampled
increase towards the window edges exactly as Prometheus' `rate()`/`increase()`
(extrapolatedRate in promql/functions.go); "none" divides the raw increase between the
first and the last sample by the time between them."""


@dataclass(frozen=True, slots=True)
class ExplicitHistogram:
    """One explicit-bucket histogram point (cumulative since `start`, or a delta).

    `counts` has len(bounds)+1 non-negative entries (last = +Inf overflow bucket).
    """

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    sum: float = math.nan

    @property
    def count(self) -> float:
        return math.fsum(self.counts)


@dataclass(frozen=True, slots=True)
class ExponentialHistogram:
    """One OTel exponential histogram point.

    base = 2 ** (2 ** -scale); positive bucket index i (i = offset + k for counts[k])
    holds observations in (base**i, base**(i+1)]; negative bucket i holds
    [-base**(i+1), -base**i); the zero bucket holds [-zero_threshold, zero_threshold].
    """

    scale: int
    zero_count: float = 0.0
    positive_offset: int = 0
    positive_counts: tuple[float, ...] = ()
    negative_offset: int = 0
    negative_counts: tuple[float, ...] = ()
    zero_threshold: float = 0.0
    sum: float = math.nan

    @property
    def count(self) -> float:
        return self.zero_count + math.fsum(self.positive_counts) + math.fsum(self.negative_counts)


# --- quantiles ---------------------------------------------------------------------------


def _edge_quantile(q: float) -> float | None:
    """Prometheus' answer for a q that is NaN (NaN) or outside [0, 1] (-Inf below, +Inf
    above); None for a q in [0, 1]."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    return None


def bucket_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float:
    """Prometheus' `histogram_quantile` over cumulative ``(le, count)`` buckets.

    Mirrors promql/quantile.go (BucketQuantile) step by step:

    - q NaN -> NaN; q < 0 -> -Inf; q > 1 -> +Inf.
    - buckets are sorted by `le`; without a +Inf bucket the result is NaN; buckets with the
      same `le` are merged (counts added); counts that decrease are raised to the running
      maximum (Prometheus' monotonicity fix); fewer than two buckets or zero observations
      -> NaN.
    - rank = q * N (N = count of the +Inf bucket); b = first bucket with count >= rank.
      If b is the +Inf bucket, the answer is the largest finite `le` (Prometheus cannot
      see above it). If b is the first bucket and its `le` <= 0, the answer is that `le`.
      Otherwise linear interpolation inside bucket b:

          lower + (upper - lower) * (rank - count_below) / count_in_bucket

      with lower = 0 for the first bucket (positive bounds assume no negatives).
    """
    edge = _edge_quantile(q)
    if edge is not None:
        return edge
    if not buckets:
        return math.nan
    ordered = sorted(buckets, key=lambda b: b[0])
    if not math.isinf(ordered[-1][0]) or ordered[-1][0] < 0:
        return math.nan
    merged: list[list[float]] = []
    for le, c in ordered:
        if merged and merged[-1][0] == le:
            merged[-1][1] += c
        else:
            merged.append([le, c])
    running = -math.inf
    for bucket in merged:
        if bucket[1] < running:
            bucket[1] = running
        running = bucket[1]
    if len(merged) < 2:
        return math.nan
    observations = merged[-1][1]
    if observations == 0 or math.isnan(observations):
        return math.nan
    rank = q * observations
    b = len(merged) - 1
    for i in range(len(merged) - 1):
        if merged[i][1] >= rank:
            b = i
            break
    if b == len(merged) - 1:
        return merged[-2][0]
    if b == 0 and merged[0][0] <= 0:
        return merged[0][0]
    start, end, count = 0.0, merged[b][0], merged[b][1]
    if b > 0:
        start = merged[b - 1][0]
        count -= merged[b - 1][1]
        rank -= merged[b - 1][1]
    if count == 0:  # Prometheus computes 0/0 = NaN here (only reachable with q == 0)
        return math.nan
    return start + (end - start) * (rank / count)


def _cumulative(h: ExplicitHistogram) -> list[tuple[float, float]]:
    if len(h.counts) != len(h.bounds) + 1:
        raise ValueError(
            f"histogram has {len(h.bounds)} bounds but {len(h.counts)} counts "
            f"(want {len(h.bounds) + 1})"
        )
    out: list[tuple[float, float]] = []
    acc = 0.0
    for le, c in zip((*h.bounds, math.inf), h.counts, strict=True):
        acc += c
        out.append((le, acc))
    return out


def histogram_quantile(q: float, h: ExplicitHistogram) -> float:
    """The q-quantile (0..1) of an OTel explicit-bucket histogram, as `bucket_quantile`.

    Raises ValueError when counts and bounds do not match; returns NaN when empty.
    """
    return bucket_quantile(q, _cumulative(h))


_T = TypeVar("_T")


def merge_explicit(
    population: Sequence[tuple[ExplicitHistogram, _T]],
) -> tuple[ExplicitHistogram, list[_T]]:
    """One histogram for a population of series: those sharing the bounds that hold the
    most observations, their counts added (series on other bounds cannot be added bucket
    by bucket), and the tags of the ones merged. `population` must not be empty."""
    by_bounds: dict[tuple[float, ...], list[tuple[ExplicitHistogram, _T]]] = {}
    for h, tag in population:
        by_bounds.setdefault(h.bounds, []).append((h, tag))
    bounds, group = max(by_bounds.items(), key=lambda kv: sum(h.count for h, _ in kv[1]))
    counts = tuple(math.fsum(h.counts[i] for h, _ in group) for i in range(len(bounds) + 1))
    return ExplicitHistogram(bounds, counts), [tag for _, tag in group]


def quantile_bucket(q: float, h: ExplicitHistogram) -> tuple[float, float] | None:
    """(lower, upper) of the bucket the q-quantile falls in, with the first bucket's lower
    edge as `bucket_quantile` assumes it (0, or its bound when that is <= 0); upper is +Inf
    for the overflow bucket. None when the histogram is empty or q is outside [0, 1]."""
    cum = _cumulative(h)
    total = cum[-1][1]
    if total == 0 or not 0 <= q <= 1:
        return None
    rank = q * total
    for i, (le, c) in enumerate(cum[:-1]):
        if c >= rank:
            return (cum[i - 1][0] if i > 0 else min(0.0, le)), le
    return cum[-2][0] if len(cum) > 1 else -math.inf, math.inf


def quantile_error_bound(q: float, h: ExplicitHistogram) -> float:
    """Width of the bucket the q-quantile falls in: the most linear interpolation can miss
    the true quantile by (any sample distribution inside the bucket is possible).

    +Inf when the quantile falls in the overflow bucket; NaN when the histogram is empty.
    """
    bucket = quantile_bucket(q, h)
    return math.nan if bucket is None else bucket[1] - bucket[0]


QUANTILE_REFUSALS: Final = ("overflow_bucket", "zero_bucket", "wide_bucket")
"""The reasons `quantile_refusal` gives."""
THRESHOLD_REFUSAL: Final = "threshold_not_a_bound"
"""The reason an `over-ratio` read is refused: its threshold is not a bucket bound."""
REFUSALS: Final = (*QUANTILE_REFUSALS, THRESHOLD_REFUSAL)
"""Label values of kvspread_adapter_refused_reads_total's `reason`."""


def quantile_refusal(
    q: float, h: ExplicitHistogram, estimate: float, max_relative_width: float
) -> tuple[str, float, float] | None:
    """Why the q-quantile `estimate` of `h` must not be served, or None when it may.

    Returns (reason, lower, upper) of the containing bucket, reason one of:
    - "overflow_bucket": it falls in the +Inf bucket (no upper bound at all);
    - "zero_bucket": the bucket reaches down to 0 (or below), so it bounds the answer only
      from above: any value down to 0 is possible (the OTel SDK's default millisecond bounds
      on a seconds histogram put everything there);
    - "wide_bucket": (upper - lower) / lower exceeds `max_relative_width`: the true
      quantile may lie anywhere in (lower, upper], so an estimate from that bucket can be
      off by up to (upper - lower) / lower times the truth. The width is measured against
      the lower bound, not the estimate, because interpolation pushes the estimate towards
      the top of the bucket exactly when the whole tail sits in it: with bounds [0.1, 10]
      and every request at 0.8 s the p95 estimate is 9.505 s, 1.04 times the bucket width,
      while the truth is 12 times smaller (issue 25).
    A bucket of zero width (all observations at a bound <= 0) is exact and served.
    `estimate` is kept for the callers' messages; the decision does not depend on it.
    """
    bucket = quantile_bucket(q, h)
    if bucket is None:
        return None
    lower, upper = bucket
    if math.isinf(upper):
        return "overflow_bucket", lower, upper
    if upper == lower:
        return None
    if lower <= 0:
        return "zero_bucket", lower, upper
    if (upper - lower) / lower > max_relative_width:
        return "wide_bucket", lower, upper
    return None


def count_below(threshold: float, h: ExplicitHistogram) -> float:
    """Estimated number of observations <= threshold, interpolating inside the bucket.

    Exact when threshold is a bucket bound. Otherwise the bucket (lower, upper] holding
    the threshold contributes count * (threshold - lower) / (upper - lower) -- the same
    uniform-within-bucket assumption `histogram_quantile` makes, so that
    count_below(histogram_quantile(q)) == q * N. The first bucket's lower bound is 0 for
    a positive bound (as in histogram_quantile); a threshold in the +Inf bucket counts
    everything at or below the largest finite bound only.
    """
    cum = _cumulative(h)
    below = 0.0
    lower = 0.0
    for i, (le, c) in enumerate(cum):
        if math.isinf(le):
            return below
        if threshold >= le:
            below = c
            lower = le
            continue
        in_bucket = c - below
        if i == 0 and le <= 0:
            return 0.0
        if threshold <= lower:
            return below
        return below + in_bucket * (threshold - lower) / (le - lower)
    return below


def _bound_index(threshold: float, bounds: Sequence[float]) -> int | None:
    """The index of the finite bound `threshold` is (to a relative 1e-9), or None."""
    for i, b in enumerate(bounds):
        if math.isclose(threshold, b, rel_tol=1e-9, abs_tol=0.0):
            return i
    return None


def is_bound(threshold: float, h: ExplicitHistogram) -> bool:
    """Whether `threshold` is one of `h`'s finite bounds (to a relative 1e-9: a bound read
    back from a float32-rounding exporter, or written as 0.050000000000000003, is the same)."""
    return _bound_index(threshold, h.bounds) is not None


def share_above(threshold: float, h: ExplicitHistogram) -> float | None:
    """The share of `h`'s observations above `threshold`, exactly: `threshold` must be one
    of its bounds (`is_bound`), else ValueError; None when `h` is empty. The count at or
    below a bound is the cumulative count of its bucket: no interpolation."""
    i = _bound_index(threshold, h.bounds)
    if i is None:
        raise ValueError(f"threshold {threshold:g} is not a bucket bound")
    total = h.count
    if total <= 0:
        return None
    at_or_below = _cumulative(h)[i][1]
    return max(0.0, min(1.0, (total - at_or_below) / total))


def _exp_buckets(h: ExponentialHistogram) -> list[tuple[float, float, float, str]]:
    """Buckets of an exponential histogram in ascending order: (lower, upper, count, kind)."""
    base = 2.0 ** (2.0**-h.scale)
    out: list[tuple[float, float, float, str]] = []
    for k in range(len(h.negative_counts) - 1, -1, -1):
        c = h.negative_counts[k]
        if c:
            i = h.negative_offset + k
            out.append((-(base ** (i + 1)), -(base**i), c, "neg"))
    if h.zero_count:
        lo = -h.zero_threshold if any(h.negative_counts) else 0.0
        out.append((lo, h.zero_threshold, h.zero_count, "zero"))
    for k, c in enumerate(h.positive_counts):
        if c:
            i = h.positive_offset + k
            out.append((base**i, base ** (i + 1), c, "pos"))
    return out


def exponential_quantile(q: float, h: ExponentialHistogram) -> float:
    """The q-quantile of an exponential histogram, as Prometheus does for native histograms.

    rank = q * N; inside the bucket holding the rank, the fraction f = (rank - below) /
    count is interpolated exponentially for the exponential buckets (Prometheus >= 2.51
    "exponential interpolation": lower * (upper/lower) ** f for positive buckets, the
    mirror image for negative ones) and linearly inside the zero bucket. q outside
    [0, 1] and NaN behave as in `bucket_quantile`; an empty histogram gives NaN.
    """
    edge = _edge_quantile(q)
    if edge is not None:
        return edge
    buckets = _exp_buckets(h)
    total = math.fsum(b[2] for b in buckets)
    if total == 0:
        return math.nan
    rank = q * total
    below = 0.0
    for idx, (lo, hi, c, kind) in enumerate(buckets):
        if below + c >= rank or idx == len(buckets) - 1:
            f = min(max((rank - below) / c, 0.0), 1.0)
            if kind == "pos":
                return float(lo * (hi / lo) ** f)  # float ** float is typed Any
            if kind == "neg":
                # [lo, hi) with lo < hi < 0: exponential in |x|, walking up from lo
                return -float((-lo) * ((-hi) / (-lo)) ** f)
            return lo + (hi - lo) * f
        below += c
    return math.nan  # pragma: no cover - the loop always returns


def exponential_downscale(h: ExponentialHistogram, scale: int) -> ExponentialHistogram:
    """The same histogram at a lower (coarser) scale: index i becomes i >> (h.scale - scale).

    Needed before subtracting two points whose SDK changed scale in between.
    """
    if scale > h.scale:
        raise ValueError(f"cannot upscale an exponential histogram from {h.scale} to {scale}")
    shift = h.scale - scale

    def fold(offset: int, counts: tuple[float, ...]) -> tuple[int, tuple[float, ...]]:
        if not counts:
            return 0, ()
        lo = offset >> shift
        hi = (offset + len(counts) - 1) >> shift
        out = [0.0] * (hi - lo + 1)
        for k, c in enumerate(counts):
            out[((offset + k) >> shift) - lo] += c
        return lo, tuple(out)

    po, pc = fold(h.positive_offset, h.positive_counts)
    no, nc = fold(h.negative_offset, h.negative_counts)
    return replace(
        h,
        scale=scale,
        positive_offset=po,
        positive_counts=pc,
        negative_offset=no,
        negative_counts=nc,
    )


# --- counters: increase and rate ---------------------------------------------------------


def extrapolation_factor(
    first_t: float,
    last_t: float,
    n: int,
    window_start: float,
    window_end: float,
    first_value: float,
    raw_increase: float,
    is_counter: bool = True,
) -> float:
    """Factor by which Prometheus scales the sampled increase to cover the whole window.

    From promql/functions.go (extrapolatedRate): with sampled = last_t - first_t and
    avg = sampled / (n - 1), the gap to each window edge is added in full when it is
    shorter than 1.1 * avg, else only avg / 2 is added. For counters the start gap is
    first capped at the time the counter would have taken to grow from zero,
    sampled * first_value / raw_increase. factor = extended / sampled.
    """
    sampled = last_t - first_t
    if n < 2 or sampled <= 0:
        return math.nan
    to_start = first_t - window_start
    to_end = window_end - last_t
    avg = sampled / (n - 1)
    if is_counter and raw_increase > 0 and first_value >= 0:
        to_zero = sampled * (first_value / raw_increase)
        to_start = min(to_start, to_zero)
    threshold = avg * 1.1
    extended = sampled
    extended += to_start if to_start < threshold else avg / 2
    extended += to_end if to_end < threshold else avg / 2
    return extended / sampled


def _raw_increase(samples: Sequence[Sample]) -> float:
    """last - first plus, for each drop (a counter reset), the value before the drop."""
    total = 0.0
    prev = samples[0][1]
    for _, v in samples[1:]:
        total += v - prev if v >= prev else v  # after a reset the counter restarted at 0
        prev = v
    return total


def _in_window(samples: Sequence[Sample], start: float, end: float) -> list[Sample]:
    return [s for s in samples if start < s[0] <= end]


def increase(
    samples: Sequence[Sample],
    window_start: float,
    window_end: float,
    extrapolation: Extrapolation = "prometheus",
) -> float | None:
    """Increase of a cumulative counter over (window_start, window_end].

    Counter resets (a value lower than its predecessor) are handled as Prometheus does:
    the counter is taken to have restarted from 0, so the new value counts in full.
    With "prometheus" extrapolation the sampled increase is scaled by
    `extrapolation_factor`; with "none" it is the raw increase between the first and last
    sample in the window. None when fewer than two samples fall in the window.
    """
    pts = _in_window(samples, window_start, window_end)
    if len(pts) < 2:
        return None
    raw = _raw_increase(pts)
    if extrapolation == "none":
        return raw
    return raw * extrapolation_factor(
        pts[0][0], pts[-1][0], len(pts), window_start, window_end, pts[0][1], raw
    )


def rate(
    samples: Sequence[Sample],
    window_start: float,
    window_end: float,
    extrapolation: Extrapolation = "prometheus",
) -> float | None:
    """Per-second rate of a cumulative counter over (window_start, window_end].

    "prometheus": increase (extrapolated) / (window_end - window_start), as `rate()`.
    "none": raw increase / (last_t - first_t). None with fewer than two samples.
    """
    pts = _in_window(samples, window_start, window_end)
    if len(pts) < 2:
        return None
    inc = increase(pts, window_start, window_end, extrapolation)
    if inc is None:  # pragma: no cover - guarded above
        return None
    if extrapolation == "none":
        return inc / (pts[-1][0] - pts[0][0]) if pts[-1][0] > pts[0][0] else None
    return inc / (window_end - window_start)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is missing or the denominator is 0.

    An error ratio over a window without traffic is undefined, not 0: serving 0 would tell
    an HPA that all is well when nothing was measured.
    """
    if numerator is None or denominator is None or denominator == 0:
        return None
    if math.isnan(numerator) or math.isnan(denominator):
        return None
    return numerator / denominator


# --- histogram windows -------------------------------------------------------------------


def histogram_delta(older: ExplicitHistogram, newer: ExplicitHistogram) -> ExplicitHistogram:
    """newer - older, bucket by bucket, for two cumulative points of one series.

    A reset (the total count or any bucket went down) means the series restarted, so
    `newer` itself is the increase. Different bounds also count as a restart.
    """
    if older.bounds != newer.bounds or len(older.counts) != len(newer.counts):
        return newer
    if any(n < o for o, n in zip(older.counts, newer.counts, strict=True)):
        return newer
    counts = tuple(n - o for o, n in zip(older.counts, newer.counts, strict=True))
    s = newer.sum - older.sum if newer.sum >= older.sum else newer.sum
    return ExplicitHistogram(newer.bounds, counts, s)


def exponential_delta(
    older: ExponentialHistogram, newer: ExponentialHistogram
) -> ExponentialHistogram:
    """newer - older for exponential points, after bringing both to the coarser scale.

    A count that went down anywhere (a reset) gives `newer` itself.
    """
    scale = min(older.scale, newer.scale)
    a = exponential_downscale(older, scale)
    b = exponential_downscale(newer, scale)

    def sub(
        oa: int, ca: tuple[float, ...], ob: int, cb: tuple[float, ...]
    ) -> tuple[int, tuple[float, ...]] | None:
        if not ca and not cb:
            return 0, ()
        lo = min(x for x, c in ((oa, ca), (ob, cb)) if c)
        hi = max(x + len(c) for x, c in ((oa, ca), (ob, cb)) if c)
        out = [0.0] * (hi - lo)
        for k, c in enumerate(cb):
            out[ob + k - lo] += c
        for k, c in enumerate(ca):
            out[oa + k - lo] -= c
        if any(v < 0 for v in out):
            return None
        return lo, tuple(out)

    pos = sub(a.positive_offset, a.positive_counts, b.positive_offset, b.positive_counts)
    neg = sub(a.negative_offset, a.negative_counts, b.negative_offset, b.negative_counts)
    if pos is None or neg is None or b.zero_count < a.zero_count:
        return newer
    return ExponentialHistogram(
        scale=scale,
        zero_count=b.zero_count - a.zero_count,
        positive_offset=pos[0],
        positive_counts=pos[1],
        negative_offset=neg[0],
        negative_counts=neg[1],
        zero_threshold=max(a.zero_threshold, b.zero_threshold),
        sum=b.sum - a.sum if b.sum >= a.sum else b.sum,
    )


def exponential_add(a: ExponentialHistogram, b: ExponentialHistogram) -> ExponentialHistogram:
    """a + b at the coarser of the two scales (accumulates delta points into a total)."""
    scale = min(a.scale, b.scale)
    x = exponential_downscale(a, scale)
    y = exponential_downscale(b, scale)

    def add(
        oa: int, ca: tuple[float, ...], ob: int, cb: tuple[float, ...]
    ) -> tuple[int, tuple[float, ...]]:
        if not ca:
            return ob, cb
        if not cb:
            return oa, ca
        lo = min(oa, ob)
        out = [0.0] * (max(oa + len(ca), ob + len(cb)) - lo)
        for k, c in enumerate(ca):
            out[oa + k - lo] += c
        for k, c in enumerate(cb):
            out[ob + k - lo] += c
        return lo, tuple(out)

    po, pc = add(x.positive_offset, x.positive_counts, y.positive_offset, y.positive_counts)
    no, nc = add(x.negative_offset, x.negative_counts, y.negative_offset, y.negative_counts)
    return ExponentialHistogram(
        scale=scale,
        zero_count=x.zero_count + y.zero_count,
        positive_offset=po,
        positive_counts=pc,
        negative_offset=no,
        negative_counts=nc,
        zero_threshold=max(x.zero_threshold, y.zero_threshold),
        sum=(0.0 if math.isnan(x.sum) else x.sum) + (0.0 if math.isnan(y.sum) else y.sum),
    )


def exponential_increase(
    points: Sequence[tuple[float, ExponentialHistogram]], window_start: float, window_end: float
) -> tuple[ExponentialHistogram, float] | None:
    """Observations in (window_start, window_end] from cumulative exponential points, and
    last_t - first_t; resets handled by `exponential_delta`. None with < 2 points."""
    pts = [p for p in points if window_start < p[0] <= window_end]
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    acc: ExponentialHistogram | None = None
    for (_, a), (_, b) in zip(pts, pts[1:], strict=False):
        d = exponential_delta(a, b)
        acc = d if acc is None else exponential_add(acc, d)
    assert acc is not None
    return acc, pts[-1][0] - pts[0][0]


def histogram_increase(
    points: Sequence[tuple[float, ExplicitHistogram]],
    window_start: float,
    window_end: float,
    extrapolation: Extrapolation = "none",
) -> tuple[ExplicitHistogram, float] | None:
    """The histogram of observations made in (window_start, window_end], and its duration.

    Sums the bucket-wise deltas of consecutive cumulative points in the window (resets
    handled by `histogram_delta`). Returns (delta histogram, seconds) where seconds is
    last_t - first_t ("none") or the whole window with every bucket scaled by the
    Prometheus extrapolation factor of the total count ("prometheus"). None with fewer than
    two points in the window, or when the points span no time.
    """
    pts = [p for p in points if window_start < p[0] <= window_end]
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    bounds = pts[-1][1].bounds
    acc = [0.0] * (len(bounds) + 1)
    total_sum = 0.0
    for (_, a), (_, b) in zip(pts, pts[1:], strict=False):
        d = histogram_delta(a, b)
        if d.bounds != bounds:
            # bucket layout changed mid-window: only the part after the change is usable
            acc = [0.0] * (len(bounds) + 1)
            total_sum = 0.0
        for i, c in enumerate(d.counts):
            acc[i] += c
        total_sum += 0.0 if math.isnan(d.sum) else d.sum
    seconds = pts[-1][0] - pts[0][0]
    if extrapolation == "prometheus":
        raw = math.fsum(acc)
        f = extrapolation_factor(
            pts[0][0], pts[-1][0], len(pts), window_start, window_end, pts[0][1].count, raw
        )
        acc = [c * f for c in acc]
        total_sum *= f
        seconds = window_end - window_start
    return ExplicitHistogram(bounds, tuple(acc), total_sum), seconds


def good_rate(delta: ExplicitHistogram, seconds: float, threshold: float) -> float | None:
    """Requests per second faster than `threshold` (seconds), from a windowed histogram.

    good = `count_below(threshold, delta)` (interpolated inside the bucket when the
    threshold is not a bucket bound; exact when it is, which is why a rule's threshold
    should be one of the collector's bounds), divided by the window's `seconds`.
    """
    if seconds <= 0:
        return None
    return count_below(threshold, delta) / seconds
