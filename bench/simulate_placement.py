"""Benchmark: the full default placement replay (8 policies x seeds 42..51) and its speed.

    python3 bench/simulate_placement.py [--jobs 2] [--seeds 42..51] [--policies ...]

Prints the wall time of the whole replay and, per policy, pods scored per second of one
worker (pods that arrived, placed or rejected, over the replay time summed across seeds).
Same work as `kvspread simulate placement --jobs 2`; writes nothing.
"""

from __future__ import annotations

import argparse
import os
import time

from simulator.cli import parse_policies
from simulator.replay.policies import DEFAULT_POLICIES
from simulator.replay.report import summarise
from simulator.replay.runner import ReplayJob, run_jobs
from simulator.seeds import parse_seeds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seeds", default="42..51")
    ap.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    ap.add_argument("--trace", default="default")
    args = ap.parse_args()
    seeds = parse_seeds(args.seeds)
    policies = parse_policies(args.policies)
    jobs = [ReplayJob(args.trace, p, s) for p in policies for s in seeds]
    start = time.monotonic()
    results = run_jobs(jobs, args.jobs)
    wall = time.monotonic() - start
    print(
        f"trace {args.trace}: {len(policies)} policies x {len(seeds)} seeds, "
        f"--jobs {args.jobs} on {os.cpu_count()} CPUs: {wall:.0f} s wall"
    )
    print(f"{'policy':<20} {'pods':>8} {'seconds':>9} {'pods/s':>8} {'unalloc@100':>12}")
    for s in summarise(results):
        print(
            f"{s.policy:<20} {s.pods:>8} {s.elapsed_s:>9.1f} {s.pods_per_second:>8.0f} "
            f"{s.unalloc_100:>12.2f}"
        )


if __name__ == "__main__":
    main()
