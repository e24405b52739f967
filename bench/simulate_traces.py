"""Benchmark: kvspread against FGD (and the published FGD) on every bundled pod list.

    python3 bench/simulate_traces.py [--jobs 2] [--seeds 42..44] [--stop-at 101]

Prints, per trace, the median unallocated GPU % at 100 % arrived for FGD (this replay),
FGD (published, 10 seeds) and kvspread, and whether kvspread beats FGD.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from simulator.replay.report import published_unallocated, workload_name
from simulator.replay.runner import ReplayJob, run_jobs
from simulator.replay.trace import bundled_pod_lists
from simulator.seeds import parse_seeds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seeds", default="42..44")
    ap.add_argument("--stop-at", type=float, default=101.0)
    ap.add_argument("--traces", default=",".join(bundled_pod_lists()))
    args = ap.parse_args()
    seeds = parse_seeds(args.seeds)
    traces = args.traces.split(",")
    jobs = [
        ReplayJob(t, p, s, stop_at_percent=args.stop_at)
        for t in traces
        for p in ("fgd", "kvspread")
        for s in seeds
    ]
    start = time.monotonic()
    results = run_jobs(jobs, args.jobs)
    wall = time.monotonic() - start
    pub = published_unallocated()
    print(f"seeds {args.seeds}, {wall:.0f} s wall")
    print(f"{'trace':<12} {'FGD':>7} {'FGD pub':>8} {'kvspread':>9}  better")
    wins = 0
    for t in traces:
        med = {}
        for p in ("fgd", "kvspread"):
            vals = [
                100 - r.allocation_columns()[100] for r in results if r.trace == t and r.policy == p
            ]
            med[p] = float(np.median(vals))
        published = pub.get((workload_name(t), "fgd"), (float("nan"),))[0]
        better = med["kvspread"] < med["fgd"]
        wins += better
        print(f"{t:<12} {med['fgd']:>7.2f} {published:>8.2f} {med['kvspread']:>9.2f}  {better}")
    print(f"kvspread below FGD on {wins} of {len(traces)} traces")


if __name__ == "__main__":
    main()
