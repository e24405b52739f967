"""Speed of the serving simulation: simulated requests and events per second of wall time.

    python3 bench/serving_bench.py [--duration 3600] [--seeds 1,2,3] [--jobs 2]

1. One run per policy (seed = the first seed) in this process, single core: wall time,
   requests simulated (warm-up and drain included), engine/HPA/arrival events, and the
   ratio of simulated to wall time.
2. The default command's workload (every policy x every seed) with `--jobs` processes:
   total wall time and simulated requests per second of wall time.
Prints Markdown tables. Numbers depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from simulator.seeds import parse_seeds
from simulator.serving.config import config_from_mapping
from simulator.serving.experiment import run_experiment
from simulator.serving.placement import POLICIES
from simulator.serving.sim import Simulation


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=3600.0)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    seeds = parse_seeds(args.seeds)
    cfg = config_from_mapping({"duration_s": args.duration})

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; simulated {args.duration:g} s + "
        f"{cfg.warmup_s:g} s warm-up per run\n"
    )
    print("| policy | wall (s) | requests | requests/s wall | events/s wall | sim time / wall |")
    print("|---|---:|---:|---:|---:|---:|")
    for policy in POLICIES:
        sim = Simulation(cfg, policy, seeds[0])
        t0 = time.perf_counter()
        res = sim.run()
        wall = time.perf_counter() - t0
        n = len(res.requests)
        print(
            f"| {policy} | {wall:.2f} | {n:,} | {n / wall:,.0f} | {res.events / wall:,.0f} | "
            f"{res.sim_end / wall:,.0f}x |"
        )

    exp = run_experiment(cfg, POLICIES, seeds, jobs=args.jobs, progress=None)
    total = sum(len(r.requests) for r in exp.results)
    print("\n| command | runs | jobs | wall (s) | requests | requests/s wall |")
    print("|---|---:|---:|---:|---:|---:|")
    print(
        f"| kvspread simulate serving --synthetic --autoscalers slo "
        f"--duration {args.duration:g} --seeds {args.seeds} "
        f"--jobs {args.jobs} | {len(exp.results)} | {args.jobs} | {exp.wall_s:.1f} | "
        f"{total:,} | {total / exp.wall_s:,.0f} |"
    )


if __name__ == "__main__":
    main()
