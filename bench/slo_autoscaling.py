"""Issue 25's goals, read from a serving run: the `slo` autoscaler against the fixed fleet
sized for the peak and against request-rate and queue-depth, paired by seed.

    kvspread simulate serving --policies kvspread \\
        --autoscalers fixed-peak,request-rate,queue-depth,slo --duration 1800 --out OUT
    python3 bench/slo_autoscaling.py OUT/serving_runs.csv [--policy kvspread]
        [--baseline-policy kube-default]

Prints one Markdown table per baseline: realtime SLO attainment and GPU-hours in use over
the scored window, means and the 95 % Student t interval of the per-seed paired values,
then each goal met or not (simulator.serving.slo_goal has the goals and the wording the
serving report's opening uses too).
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path

from simulator.serving.slo_goal import markdown


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", type=Path, help="serving_runs.csv of a `kvspread simulate serving`")
    ap.add_argument("--policy", default="kvspread", help="placement policy (default kvspread)")
    ap.add_argument(
        "--baseline-policy", help="the baselines' placement (default: the same as --policy)"
    )
    args = ap.parse_args(argv)
    try:
        with args.runs.open(newline="") as f:
            lines = markdown(list(csv.DictReader(f)), args.policy, args.baseline_policy)
    except (OSError, KeyError, ValueError) as exc:
        print(f"slo_autoscaling: cannot read {args.runs}: {exc}", file=sys.stderr)
        return 2
    if not lines:
        print(f"slo_autoscaling: no {args.policy} + slo runs beside a baseline in {args.runs}",
              file=sys.stderr)  # fmt: skip
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
