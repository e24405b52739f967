"""Issue 25's goals, read from a serving run: the `slo` autoscaler against the fixed fleet
sized for the peak and against request-rate and queue-depth, paired by seed.

    kvspread simulate serving --policies kvspread \\
        --autoscalers fixed-peak,request-rate,queue-depth,slo --duration 1800 --out OUT
    python3 bench/slo_autoscaling.py OUT/serving_runs.csv [--policy kvspread]
        [--baseline-policy kube-default] [--slo-baseline OTHER/serving_runs.csv]

Prints one Markdown table per baseline: realtime SLO attainment and GPU-hours in use over
the scored window, means and the 95 % Student t interval of the per-seed paired values,
then each goal met or not (simulator.serving.slo_goal has the goals and the wording the
serving report's opening uses too). `--slo-baseline` adds one more baseline: the `slo` rows
of another run (e.g. one without the predictive term, docs/evaluation.md section 3), paired
by seed as `slo-baseline`, with the request-rate goals (more attainment, no more GPU-hours).
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path

from simulator.serving.slo_goal import BASELINES, markdown

OTHER_SLO = "slo-baseline"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", type=Path, help="serving_runs.csv of a `kvspread simulate serving`")
    ap.add_argument("--policy", default="kvspread", help="placement policy (default kvspread)")
    ap.add_argument(
        "--baseline-policy", help="the baselines' placement (default: the same as --policy)"
    )
    ap.add_argument(
        "--slo-baseline", type=Path, metavar="RUNS",
        help="another run's serving_runs.csv whose slo rows are one more baseline",
    )  # fmt: skip
    args = ap.parse_args(argv)
    baselines: tuple[str, ...] = BASELINES
    path = args.runs
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
        if args.slo_baseline is not None:
            path = args.slo_baseline
            with path.open(newline="") as f:
                rows += [
                    {**r, "autoscaler": OTHER_SLO}
                    for r in csv.DictReader(f)
                    if r["autoscaler"] == "slo"
                ]
            baselines = (*BASELINES, OTHER_SLO)
        lines = markdown(rows, args.policy, args.baseline_policy, baselines)
    except (OSError, KeyError, ValueError) as exc:
        print(f"slo_autoscaling: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    if not lines:
        print(f"slo_autoscaling: no {args.policy} + slo runs beside a baseline in {args.runs}",
              file=sys.stderr)  # fmt: skip
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
