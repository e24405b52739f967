"""Paired comparisons over seeds: mean difference, 95 % confidence interval, verdict.

Every (policy, autoscaler) pair runs on the same arrivals for a seed, so the fair test of
"is A better than B" is on the per-seed differences A - B: their mean, and a Student t
interval mean +/- t(0.975, n-1) x sd / sqrt(n). The verdict reads the interval and the size
of the difference:

- "better" / "worse": the interval lies wholly on the good / the bad side of 0;
- "inconclusive": the interval contains 0 but the mean difference is material (at least
  the metric's `material` size: 1 pp for an SLO share, 5 % of the baseline for a latency or
  a cost), so the run is too small to tell; `seeds_needed` says how many seeds would make an
  interval of the observed spread exclude 0 (the per-seed spread assumed to stay as
  observed), so "+60 % GPU-hours, 3 seeds" is never reported as "no difference";
- "no significant difference": the interval contains 0 and the mean difference is below
  the material size;
- "one seed: no CI" (no interval from one seed), "no data".

`COMPARABLE` is the one list of the metrics compared (label, display unit, which way is
good, what size of difference matters); the serving, the routing and the placement
comparisons pick their columns from it.
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
    "seeds_needed",
    "short_verdict",
    "VERDICT_LEGEND",
    "verdict_legend",
    "MAX_SEEDS_NEEDED",
    "in_words",
    "brief",
    "material_text",
    "bad_side",
]

# two-sided 95 % Student t quantiles t(0.975, df) for df = 1..30 (standard tables)
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


class Compared(NamedTuple):
    """A summary metric the paired comparisons cover: its label in the comparison tables,
    the factor and unit its differences are shown in, which way is good, and the size of
    difference that matters: `max(material, material_rel x |baseline mean|)`, in the
    metric's own unit (a share 0..1, seconds, hours, a count)."""

    metric: str
    label: str
    factor: float
    unit: str
    higher_is_better: bool = False
    material: float = 0.0
    material_rel: float = 0.05

    def in_ms(self) -> Compared:
        """The same metric (in seconds) shown in milliseconds."""
        return self._replace(factor=self.factor * 1000.0, unit="ms")

    def material_size(self, baseline_mean: float) -> float:
        """The smallest difference against `baseline_mean` this report calls material."""
        if math.isnan(baseline_mean):
            return self.material
        return max(self.material, self.material_rel * abs(baseline_mean))


_SHARE: Final = {"material": 0.01, "material_rel": 0.0}
"""SLO shares: 1 percentage point is material whatever the baseline."""

_COMPARED: Final = (
    Compared("slo_realtime", "realtime SLO", 100.0, "pp", True, **_SHARE),
    Compared("slo_batch", "batch SLO", 100.0, "pp", True, **_SHARE),
    Compared("slo_goodput_per_gpu_hour", "SLO goodput / GPU-h", 1.0, "req/GPU-h", True),
    Compared("mean_e2e_s", "mean e2e", 1.0, "s"),
    Compared("p99_e2e_s", "p99 e2e", 1.0, "s"),
    Compared("p50_ttft_s", "p50 TTFT", 1.0, "s"),
    Compared("p90_ttft_s", "p90 TTFT", 1.0, "s"),
    Compared("p99_ttft_s", "p99 TTFT", 1.0, "s"),
    Compared("mean_tpot_s", "mean TPOT", 1000.0, "ms"),
    Compared("p90_tpot_s", "p90 TPOT", 1000.0, "ms"),
    Compared("p99_tpot_s", "p99 TPOT", 1000.0, "ms"),
    Compared("oom_rate", "OOM / request", 100.0, "pp", material=0.001, material_rel=0.1),
    Compared("failed_starts", "failed starts", 1.0, "", material=1.0, material_rel=0.1),
    Compared("gpu_hours_pods", "GPU-h (memory share)", 1.0, "h"),
    Compared("gpu_hours_occupied", "GPU-h in use", 1.0, "h"),
    Compared("preemptions", "preemptions", 1.0, "", material=1.0, material_rel=0.1),
    # the placement replay (simulator.replay.report): % of all GPUs left unallocated;
    # 0.1 pp is about 6 of the Alibaba trace's 6212 GPUs
    Compared("unalloc_100", "unallocated @100 %", 1.0, "pp", material=0.1, material_rel=0.0),
    Compared("unalloc_130", "unallocated @130 %", 1.0, "pp", material=0.1, material_rel=0.0),
)
COMPARABLE: Final[Mapping[str, Compared]] = {c.metric: c for c in _COMPARED}
"""Every metric a comparison table may show, by name: one label, unit, direction and
material size per metric for every report (simulator.serving.report,
simulator.serving.routing_report, simulator.replay.report)."""

HIGHER_IS_BETTER: Final[Mapping[str, bool]] = {c.metric: c.higher_is_better for c in _COMPARED}
"""Which way is good for each compared metric."""

MAX_SEEDS_NEEDED: Final = 1000
"""`seeds_needed` above this is reported as None ("more than 1000")."""


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
    """Mean of the per-seed differences (candidate - baseline), its 95 % CI, the verdict,
    the baseline's mean over the same seeds and, when inconclusive, the seeds needed."""

    metric: str
    n: int
    mean: float
    low: float
    high: float
    verdict: str  # better | worse | inconclusive | no significant difference | one seed: no CI
    baseline_mean: float = math.nan
    seeds_needed: int | None = None

    @property
    def relative(self) -> float:
        """The mean difference as a fraction of the baseline's mean (NaN at a zero one)."""
        if math.isnan(self.baseline_mean) or self.baseline_mean == 0:
            return math.nan
        return self.mean / abs(self.baseline_mean)

    def row(self) -> dict[str, object]:
        """The CSV columns of one comparison: metric, seeds, mean_diff, CI, verdict, then
        baseline_mean, rel_diff and seeds_needed (empty unless inconclusive)."""
        return {
            "metric": self.metric,
            "seeds": self.n,
            "mean_diff": self.mean,
            "ci_low": self.low,
            "ci_high": self.high,
            "verdict": self.verdict,
            "baseline_mean": self.baseline_mean,
            "rel_diff": self.relative,
            "seeds_needed": "" if self.seeds_needed is None else self.seeds_needed,
        }


def seeds_needed(mean: float, sd: float, start: int) -> int | None:
    """The smallest n >= `start` whose 95 % t interval, at this per-seed `sd`, would exclude
    0 for a mean difference of `mean`; None above MAX_SEEDS_NEEDED. The normal
    approximation (1.96 sd / mean)^2 gives the first guess, the t quantile the answer."""
    if mean == 0 or math.isnan(mean) or math.isnan(sd):
        return None
    if sd == 0:
        return start
    guess = (1.95996 * sd / abs(mean)) ** 2
    if guess > MAX_SEEDS_NEEDED:
        return None
    n = max(start, math.ceil(guess))
    while n <= MAX_SEEDS_NEEDED:
        if t_quantile_975(n - 1) * sd / math.sqrt(n) < abs(mean):
            return n
        n += 1
    return None


def paired(metric: str, candidate: Sequence[float], baseline: Sequence[float]) -> Paired:
    """Compare two equally long per-seed series (NaN pairs dropped)."""
    kept = [
        (a, b)
        for a, b in zip(candidate, baseline, strict=True)
        if not (math.isnan(a) or math.isnan(b))
    ]
    diffs = [a - b for a, b in kept]
    n = len(diffs)
    if n == 0:
        return Paired(metric, 0, math.nan, math.nan, math.nan, "no data")
    mean = sum(diffs) / n
    base = sum(b for _, b in kept) / n
    if n == 1:
        return Paired(metric, 1, mean, math.nan, math.nan, "one seed: no CI", base)
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    low, high = mean - half, mean + half
    good_up = HIGHER_IS_BETTER.get(metric, True)
    spec = COMPARABLE.get(metric)
    material = spec.material_size(base) if spec is not None else 0.0
    needed = None
    if low > 0:
        verdict = "better" if good_up else "worse"
    elif high < 0:
        verdict = "worse" if good_up else "better"
    elif abs(mean) >= material and mean != 0:
        verdict = "inconclusive"
        needed = seeds_needed(mean, sd, n + 1)
    else:
        verdict = "no significant difference"
    return Paired(metric, n, mean, low, high, verdict, base, needed)


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


def short_verdict(c: Mapping[str, Any]) -> str:
    """The verdict in a table cell: "n.s.", or "unresolved (~N seeds)" for an inconclusive
    one (N: `seeds_needed`; "> 1000" when more)."""
    if c["verdict"] == "inconclusive":
        need = c.get("seeds_needed")
        return f"unresolved (~{need} seeds)" if need not in (None, "") else "unresolved (> 1000)"
    verdict = str(c["verdict"])
    return _SHORT_VERDICT.get(verdict, verdict)


def cell(c: Mapping[str, Any] | None, factor: float, unit: str) -> str:
    """One comparison (a `Paired.row()`) as a table cell: mean difference x `factor`
    [95 % CI] and the verdict (see `short_verdict`); "-" without data. Two decimals under
    10, one under 100, whole numbers above (milliseconds whole from 10 ms)."""
    if c is None or math.isnan(c["mean_diff"]):
        return "-"
    u = f" {unit}" if unit else ""
    size = abs(c["mean_diff"] * factor)
    d = 0 if size >= 100 or (unit == "ms" and size >= 10) else 1 if size >= 10 else 2
    text = f"{c['mean_diff'] * factor:+.{d}f}{u}"
    if not math.isnan(c["ci_low"]):
        text += f" [{c['ci_low'] * factor:+.{d}f}, {c['ci_high'] * factor:+.{d}f}]"
    return f"{text} {short_verdict(c)}"


def verdict_legend(
    material: str = "at least 1 pp for an SLO share, 5 % of the baseline for a latency, "
    "a cost or the goodput",
) -> str:
    """How a comparison table's verdicts read, one wording for every report; `material`
    says which size of difference counts as material there."""
    return (
        "better / worse: the 95 % interval lies wholly on that side of 0; unresolved "
        f"(~N seeds): the interval contains 0 but the difference is material ({material}), "
        "so this run is too small to tell, and about N seeds would tell if the per-seed "
        "spread stays as observed; n.s.: the interval contains 0 and the difference is "
        "below that size"
    )


VERDICT_LEGEND: Final = verdict_legend()
"""How every comparison table's verdicts read (one wording for every report)."""


def _num(v: float) -> str:
    """A signed difference to about three significant figures."""
    a = abs(v)
    d = 0 if a >= 100 else 1 if a >= 10 else 2
    return f"{v:+,.{d}f}"


def material_text(spec: Compared) -> str:
    """The material size of `spec` in words ("1 pp", "5 % of the baseline")."""
    fixed = f"{spec.material * spec.factor:g}{(' ' + spec.unit) if spec.unit else ''}"
    rel = f"{100 * spec.material_rel:g} % of the baseline"
    if spec.material_rel == 0:
        return fixed
    if spec.material == 0:
        return rel
    return f"{fixed} or {rel}, whichever is larger"


def _size(c: Mapping[str, Any], spec: Compared, extra: str = "") -> str:
    """The difference in `spec`'s unit, relative to the baseline where that reads (not for
    shares in pp), `extra` added in the same parentheses: "+0.86 h (+58 %)"."""
    u = f" {spec.unit}" if spec.unit else ""
    text = f"{_num(c['mean_diff'] * spec.factor)}{u}"
    rel = c.get("rel_diff", math.nan)
    notes = []
    if spec.unit != "pp" and isinstance(rel, float) and math.isfinite(rel):
        notes.append(f"{100 * rel:+.0f} %")
    if extra:
        notes.append(extra)
    return f"{text} ({'; '.join(notes)})" if notes else text


def _need(c: Mapping[str, Any]) -> str:
    need = c.get("seeds_needed")
    return f"~{need}" if need not in (None, "") else f"> {MAX_SEEDS_NEEDED}"


def in_words(c: Mapping[str, Any] | None, spec: Compared) -> str:
    """One comparison (a `Paired.row()`) as a clause for a report's prose: the size, the
    95 % interval and the verdict; an unresolved one says that its seeds cannot tell and
    about how many would ("~N would": the seeds an interval of the observed per-seed spread
    needs to exclude 0)."""
    if c is None or math.isnan(c["mean_diff"]):
        return "not compared"
    text = _size(c, spec)
    if math.isnan(c["ci_low"]):
        return f"{text}, one seed: no interval"
    lo, hi = _num(c["ci_low"] * spec.factor), _num(c["ci_high"] * spec.factor)
    text += f", 95 % CI {lo} to {hi}"
    verdict = c["verdict"]
    if verdict == "inconclusive":
        return f"{text}: {c['seeds']} seeds cannot tell ({_need(c)} would)"
    if verdict == "no significant difference":
        base = c.get("baseline_mean", math.nan)
        known = isinstance(base, int | float) and math.isfinite(base)
        size = spec.material_size(float(base)) if known else 0.0
        if size and max(-c["ci_low"], c["ci_high"]) >= size:
            return (
                f"{text}: no significant difference, but the interval reaches past the "
                f"{material_text(spec)} that matters, so {c['seeds']} seeds cannot rule one out"
            )
        return f"{text}: no significant difference (under the {material_text(spec)} that matters)"
    return f"{text}: {verdict}"


def brief(c: Mapping[str, Any], spec: Compared) -> str:
    """A loss in a list: label and size, with the interval of a significant one or the
    seeds an unresolved one needs: "GPU-h in use +0.86 h (+58 %; ~5 seeds would tell)"."""
    if c["verdict"] == "inconclusive":
        return f"{spec.label} {_size(c, spec, f'{_need(c)} seeds would tell')}"
    lo, hi = _num(c["ci_low"] * spec.factor), _num(c["ci_high"] * spec.factor)
    return f"{spec.label} {_size(c, spec)} [{lo}, {hi}]"


def bad_side(c: Mapping[str, Any]) -> bool:
    """True when the mean difference points the bad way for its metric."""
    up = HIGHER_IS_BETTER.get(str(c["metric"]), True)
    mean = float(c["mean_diff"])
    return (mean < 0) if up else (mean > 0)
