"""Issue 25's goals for the `slo` autoscaler, read off a run's per-seed rows.

Against the fixed fleet sized for the peak (`fixed-peak`): realtime SLO attainment at least
its own minus 1 pp, with at most 75 % of its GPU-hours in use over the scored window.
Against `request-rate` and `queue-depth`: higher attainment at no more GPU-hours. All under
one placement (kvspread by default), paired by seed. A goal is "met" when the whole 95 %
Student t interval of the per-seed paired values lies on its side, "met by the mean only"
when only the mean does, else "not met"; the numbers are always printed beside the word.

Both the serving report's opening (`opening`) and bench/slo_autoscaling.py (`markdown`)
read it, so the two never word the result differently.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simulator.serving.stats import t_quantile_975

__all__ = ["Check", "Goal", "checks", "markdown", "opening"]

ATTAINMENT = "slo_realtime"
GPU_HOURS = "gpu_hours_scored"
MARGIN_PP = 1.0
"""Attainment may fall this far below the fixed fleet's (issue 25)."""
GPU_SHARE = 75.0
"""Percent of the fixed fleet's GPU-hours the slo autoscaler may use (issue 25)."""
BASELINES = ("fixed-peak", "request-rate", "queue-depth")


def _interval(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean and 95 % Student t interval (NaN bounds for fewer than two values)."""
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, math.nan, math.nan
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


@dataclass(frozen=True)
class Goal:
    """One goal and how it came out."""

    text: str
    word: str  # met | met by the mean only | not met


@dataclass(frozen=True)
class Check:
    """slo against one baseline: means, paired intervals, the goals."""

    baseline: str
    seeds: int
    slo_attainment: float
    base_attainment: float
    attainment_pp: tuple[float, float, float]
    slo_gpu_hours: float
    base_gpu_hours: float
    gpu_hours: tuple[float, float, float]
    gpu_share_pct: tuple[float, float, float]
    goals: tuple[Goal, ...]


def _pct(v: tuple[float, float, float]) -> tuple[float, float, float]:
    return 100 * v[0], 100 * v[1], 100 * v[2]


def _word(sure: bool, point: bool) -> str:
    return "met" if sure else ("met by the mean only" if point else "not met")


def checks(
    rows: Sequence[Mapping[str, Any]],
    policy: str = "kvspread",
    baseline_policy: str | None = None,
    baselines: Sequence[str] = BASELINES,
) -> list[Check]:
    """One `Check` per baseline autoscaler (of `baselines`) present beside `policy` + slo,
    the baselines under `baseline_policy` (default: the same placement); first routing
    policy only."""
    routing = rows[0]["routing"] if rows else None
    by: dict[tuple[str, str], dict[int, Mapping[str, Any]]] = {}
    for r in rows:
        if r["routing"] == routing:
            by.setdefault((str(r["policy"]), str(r["autoscaler"])), {})[int(r["seed"])] = r
    mine = by.get((policy, "slo"), {})
    if not mine:
        return []
    out = []
    for name in baselines:
        other = by.get((baseline_policy or policy, name), {})
        seeds = sorted(set(mine) & set(other))
        if not seeds:
            continue
        slo = [mine[s] for s in seeds]
        base = [other[s] for s in seeds]

        def col(rs: Sequence[Mapping[str, Any]], key: str) -> list[float]:
            return [float(r[key]) for r in rs]

        sa, ba = col(slo, ATTAINMENT), col(base, ATTAINMENT)
        sg, bg = col(slo, GPU_HOURS), col(base, GPU_HOURS)
        att = _pct(_interval([a - b for a, b in zip(sa, ba, strict=True)]))
        gpu = _interval([a - b for a, b in zip(sg, bg, strict=True)])
        share = _pct(_interval([a / b for a, b in zip(sg, bg, strict=True)]))
        if name == "fixed-peak":
            goals = (
                Goal(
                    f"realtime attainment >= fixed-peak's - {MARGIN_PP:g} pp",
                    _word(att[1] >= -MARGIN_PP, att[0] >= -MARGIN_PP),
                ),
                Goal(
                    f"<= {GPU_SHARE:g} % of fixed-peak's GPU-hours",
                    _word(share[2] <= GPU_SHARE, share[0] <= GPU_SHARE),
                ),
            )
        else:
            goals = (
                Goal(f"realtime attainment above {name}'s", _word(att[1] > 0, att[0] > 0)),
                Goal(f"no more GPU-hours than {name}", _word(gpu[2] <= 0, gpu[0] <= 0)),
            )
        n = len(seeds)
        out.append(
            Check(name, n, math.fsum(sa) / n, math.fsum(ba) / n, att, math.fsum(sg) / n,
                  math.fsum(bg) / n, gpu, share, goals)
        )  # fmt: skip
    return out


def _ci(v: tuple[float, float, float], unit: str, fmt: str = "+.2f") -> str:
    return f"{v[0]:{fmt}}{unit} [{v[1]:{fmt}}, {v[2]:{fmt}}]"


def markdown(
    rows: Sequence[Mapping[str, Any]],
    policy: str = "kvspread",
    baseline_policy: str | None = None,
    baselines: Sequence[str] = BASELINES,
) -> list[str]:
    """One table and the goals per baseline, as Markdown lines."""
    lines: list[str] = []
    other = baseline_policy or policy
    for c in checks(rows, policy, baseline_policy, baselines):
        lines += [
            f"### {policy} + slo against {other} + {c.baseline} ({c.seeds} seeds)",
            "",
            f"| | slo | {c.baseline} | paired difference [95 % CI] |",
            "|---|---:|---:|---|",
            f"| realtime SLO attainment | {100 * c.slo_attainment:.2f} % | "
            f"{100 * c.base_attainment:.2f} % | {_ci(c.attainment_pp, ' pp')} |",
            f"| GPU-hours in use, scored window | {c.slo_gpu_hours:.3f} | "
            f"{c.base_gpu_hours:.3f} | {_ci(c.gpu_hours, ' h', '+.3f')}; slo uses "
            f"{_ci(c.gpu_share_pct, ' %', '.1f')} of it |",
            "",
            *(f"- {g.text}: **{g.word}**" for g in c.goals),
            "",
        ]
    return lines


def opening(rows: Sequence[Mapping[str, Any]], policy: str = "kvspread") -> list[str]:
    """The report opening's sentence on issue 25's goals; empty without slo and fixed-peak."""
    found = checks(rows, policy)
    peak = next((c for c in found if c.baseline == "fixed-peak"), None)
    if peak is None:
        return []
    parts = [
        f"{policy} + slo against the fixed fleet sized for the peak ({policy} + fixed-peak): "
        f"realtime SLO {_ci(peak.attainment_pp, ' pp')}, GPU-hours "
        f"{_ci(peak.gpu_share_pct, ' %', '.1f')} of the fixed fleet's; "
        + "; ".join(f"{g.text} {g.word}" for g in peak.goals)
    ]
    for c in found:
        if c is not peak:
            parts.append(
                f"against {c.baseline}: realtime SLO {_ci(c.attainment_pp, ' pp')}, GPU-hours "
                f"{_ci(c.gpu_hours, ' h', '+.3f')} ("
                + ", ".join(f"{g.text} {g.word}" for g in c.goals)
                + ")"
            )
    return ["; ".join(parts) + "."]
