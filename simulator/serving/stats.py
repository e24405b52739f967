"""Paired comparisons over seeds: mean difference, 95 % confidence interval, verdict.

Every (policy, autoscaler) pair runs on the same arrivals for a seed, so the fair test of
"is A better than B" is on the per-seed differences A - B: their mean, and a Student t
interval mean +/- t(0.975, n-1) x sd / sqrt(n). The verdict reads the interval: it lies
wholly on the good side ("better"), wholly on the bad side ("worse"), or contains 0
("no significant difference"). With one seed there is no interval ("one seed: no CI").

`COMPARABLE` is the one list of the metrics compared (label, display unit, which way is
good); the placement and the routing comparison tables pick their columns from it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

__all__ = [
    "t_quantile_975",
    "Paired",
    "paired",
    "compare",
    "cell",
    "Compared",
    "COMPARABLE",
    "compared",
    "HIGHER_IS_BETTER",
]

# two-sided 95 % Student t quantiles t(0.975, df) for df = 1..30 (standard tables)
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


class Compared(NamedTuple):
    """A summary metric the paired comparisons cover: its label in the comparison tables,
    the factor and unit its differences are shown in, and which way is good."""

    metric: str
    label: str
    factor: float
    unit: str
    higher_is_better: bool = False

    def in_ms(self) -> Compared:
        """The same metric (in seconds) shown in milliseconds."""
        return self._replace(factor=self.factor * 1000.0, unit="ms")


_COMPARED: Final = (
    Compared("slo_realtime", "realtime SLO", 100.0, "pp", higher_is_better=True),
    Compared("slo_batch", "batch SLO", 100.0, "pp", higher_is_better=True),
    Compared("mean_e2e_s", "mean e2e", 1.0, "s"),
    Compared("p99_e2e_s", "p99 e2e", 1.0, "s"),
    Compared("p99_ttft_s", "p99 TTFT", 1.0, "s"),
    Compared("oom_rate", "OOM / request", 100.0, "pp"),
    Compared("failed_starts", "failed starts", 1.0, ""),
    Compared("gpu_hours_pods", "GPU-h (memory share)", 1.0, "h"),
    Compared("gpu_hours_occupied", "GPU-h in use", 1.0, "h"),
    Compared("preemptions", "preemptions", 1.0, ""),
)
COMPARABLE: Final[Mapping[str, Compared]] = {c.metric: c for c in _COMPARED}
"""Every metric a comparison table may show, by name: one label and unit per metric for
both reports (simulator.serving.report, simulator.serving.routing_report)."""

HIGHER_IS_BETTER: Final[Mapping[str, bool]] = {c.metric: c.higher_is_better for c in _COMPARED}
"""Which way is good for each compared metric."""


def compared(*metrics: str) -> tuple[Compared, ...]:
    """The columns of a comparison table: these metrics of COMPARABLE, in this order."""
    return tuple(COMPARABLE[m] for m in metrics)


def t_quantile_975(df: int) -> float:
    """t(0.975, df): scipy's when installed, else the table (df > 30: the normal 1.96
    plus the first-order correction 2.4 / df)."""
    if df < 1:
        return math.nan
    try:
        from scipy.stats import t

        return float(t.ppf(0.975, df))
    except ImportError:  # pragma: no cover - scipy is installed here
        return _T975[df - 1] if df <= 30 else 1.95996 + 2.4 / df


@dataclass(frozen=True)
class Paired:
    """Mean of the per-seed differences (candidate - baseline) and its 95 % CI."""

    metric: str
    n: int
    mean: float
    low: float
    high: float
    verdict: str  # better | worse | no significant difference | one seed: no CI

    def row(self) -> dict[str, object]:
        """The CSV columns of one comparison: metric, seeds, mean_diff, CI, verdict."""
        return {
            "metric": self.metric,
            "seeds": self.n,
            "mean_diff": self.mean,
            "ci_low": self.low,
            "ci_high": self.high,
            "verdict": self.verdict,
        }


def paired(metric: str, candidate: Sequence[float], baseline: Sequence[float]) -> Paired:
    """Compare two equally long per-seed series (NaN pairs dropped)."""
    diffs = [
        a - b
        for a, b in zip(candidate, baseline, strict=True)
        if not (math.isnan(a) or math.isnan(b))
    ]
    n = len(diffs)
    if n == 0:
        return Paired(metric, 0, math.nan, math.nan, math.nan, "no data")
    mean = sum(diffs) / n
    if n == 1:
        return Paired(metric, 1, mean, math.nan, math.nan, "one seed: no CI")
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    low, high = mean - half, mean + half
    good_up = HIGHER_IS_BETTER.get(metric, True)
    if low > 0:
        verdict = "better" if good_up else "worse"
    elif high < 0:
        verdict = "worse" if good_up else "better"
    else:
        verdict = "no significant difference"
    return Paired(metric, n, mean, low, high, verdict)


def compare(
    rows: Sequence[Mapping[str, object]],
    baseline: tuple[str, str],
    metrics: Sequence[str],
) -> list[dict[str, object]]:
    """Every (policy, autoscaler) of `rows` against `baseline` on `metrics`, paired by
    seed (only seeds both have). One dict per (pair, metric)."""
    by: dict[tuple[str, str], dict[int, Mapping[str, object]]] = {}
    for r in rows:
        key = (str(r["policy"]), str(r["autoscaler"]))
        by.setdefault(key, {})[int(r["seed"])] = r  # type: ignore[call-overload]
    base = by.get(baseline, {})
    out: list[dict[str, object]] = []
    for key, runs in by.items():
        if key == baseline:
            continue
        seeds = sorted(set(runs) & set(base))
        for m in metrics:
            p = paired(
                m,
                [float(runs[s][m]) for s in seeds],  # type: ignore[arg-type]
                [float(base[s][m]) for s in seeds],  # type: ignore[arg-type]
            )
            out.append({"policy": key[0], "autoscaler": key[1], **p.row()})
    return out


_SHORT_VERDICT = {"better": "better", "worse": "worse", "no significant difference": "n.s."}


def cell(c: Mapping[str, Any] | None, factor: float, unit: str) -> str:
    """One comparison (a `Paired.row()`) as a table cell: mean difference x `factor`
    [95 % CI] and the verdict ("n.s." for no significant difference); "-" without data.
    Milliseconds are shown whole, everything else to two decimals."""
    if c is None or math.isnan(c["mean_diff"]):
        return "-"
    u = f" {unit}" if unit else ""
    d = 0 if unit == "ms" else 2
    text = f"{c['mean_diff'] * factor:+.{d}f}{u}"
    if not math.isnan(c["ci_low"]):
        text += f" [{c['ci_low'] * factor:+.{d}f}, {c['ci_high'] * factor:+.{d}f}]"
    return f"{text} {_SHORT_VERDICT.get(c['verdict'], c['verdict'])}"
