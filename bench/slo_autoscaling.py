"""Issue 25's goals, read from a serving run: the `slo` autoscaler against the fixed fleet
sized for the peak and against request-rate and queue-depth, paired by seed.

    kvspread simulate serving --policies kvspread \\
        --autoscalers fixed-peak,request-rate,queue-depth,slo --duration 1800 --out OUT
    python3 bench/slo_autoscaling.py OUT/serving_runs.csv [--policy kvspread]

Prints one Markdown table per comparison: realtime SLO attainment (difference in pp) and
GPU-hours in use over the scored window (difference, and slo's share of the baseline's),
each with its mean over the seeds and a 95 % Student t interval of the per-seed paired
values, then whether each goal is met. The goals (docs/evaluation.md, "SLO pressure
autoscaling"): against fixed-peak, attainment >= its own minus 1 pp and <= 75 % of its
GPU-hours; against request-rate and queue-depth, higher attainment at no more GPU-hours.
"Met" needs the whole interval on the right side; the point estimate alone is reported as
such.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from simulator.serving.stats import t_quantile_975

ATTAINMENT = "slo_realtime"
GPU_HOURS = "gpu_hours_scored"


def interval(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean and 95 % Student t interval of per-seed values."""
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, math.nan, math.nan
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def load(path: Path, policy: str) -> dict[str, dict[int, dict[str, str]]]:
    """autoscaler -> seed -> row of `serving_runs.csv` (first routing policy only)."""
    out: dict[str, dict[int, dict[str, str]]] = defaultdict(dict)
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    routing = rows[0]["routing"] if rows else ""
    for r in rows:
        if r["policy"] == policy and r["routing"] == routing:
            out[r["autoscaler"]][int(r["seed"])] = r
    return out


def compare(runs: dict[str, dict[int, dict[str, str]]], baseline: str) -> list[str]:
    """Markdown lines: slo against `baseline` on attainment and GPU-hours."""
    seeds = sorted(set(runs["slo"]) & set(runs[baseline]))
    slo = [runs["slo"][s] for s in seeds]
    base = [runs[baseline][s] for s in seeds]
    att = [float(a[ATTAINMENT]) - float(b[ATTAINMENT]) for a, b in zip(slo, base, strict=True)]
    gpu = [float(a[GPU_HOURS]) - float(b[GPU_HOURS]) for a, b in zip(slo, base, strict=True)]
    share = [float(a[GPU_HOURS]) / float(b[GPU_HOURS]) for a, b in zip(slo, base, strict=True)]
    a_m, a_lo, a_hi = (100 * v for v in interval(att))
    g_m, g_lo, g_hi = interval(gpu)
    s_m, s_lo, s_hi = (100 * v for v in interval(share))
    lines = [
        f"### slo against {baseline} ({len(seeds)} seeds)",
        "",
        "| | slo | " + baseline + " | paired difference [95 % CI] |",
        "|---|---:|---:|---|",
        f"| realtime SLO attainment | {_mean(slo, ATTAINMENT) * 100:.2f} % | "
        f"{_mean(base, ATTAINMENT) * 100:.2f} % | {a_m:+.2f} pp [{a_lo:+.2f}, {a_hi:+.2f}] |",
        f"| GPU-hours in use (scored window) | {_mean(slo, GPU_HOURS):.3f} | "
        f"{_mean(base, GPU_HOURS):.3f} | {g_m:+.3f} h [{g_lo:+.3f}, {g_hi:+.3f}]; "
        f"slo uses {s_m:.1f} % [{s_lo:.1f}, {s_hi:.1f}] of it |",
        "",
    ]
    if baseline == "fixed-peak":
        goals = [
            ("attainment >= fixed-peak - 1 pp", a_lo >= -1.0, a_m >= -1.0),
            ("GPU-hours <= 75 % of fixed-peak", s_hi <= 75.0, s_m <= 75.0),
        ]
    else:
        goals = [
            (f"attainment above {baseline}", a_lo > 0, a_m > 0),
            (f"GPU-hours no more than {baseline}", g_hi <= 0, g_m <= 0),
        ]
    for text, sure, point in goals:
        word = "met" if sure else ("met by the mean only" if point else "not met")
        lines.append(f"- {text}: **{word}**")
    lines.append("")
    return lines


def _mean(rows: Sequence[dict[str, str]], key: str) -> float:
    return math.fsum(float(r[key]) for r in rows) / len(rows)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", type=Path, help="serving_runs.csv of a `kvspread simulate serving`")
    ap.add_argument("--policy", default="kvspread", help="placement policy (default kvspread)")
    args = ap.parse_args(argv)
    try:
        runs = load(args.runs, args.policy)
    except (OSError, KeyError, ValueError) as exc:
        print(f"slo_autoscaling: cannot read {args.runs}: {exc}", file=sys.stderr)
        return 2
    if "slo" not in runs:
        print(f"slo_autoscaling: no {args.policy} + slo runs in {args.runs}", file=sys.stderr)
        return 2
    lines = []
    for baseline in ("fixed-peak", "request-rate", "queue-depth"):
        if baseline in runs:
            lines += compare(runs, baseline)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
