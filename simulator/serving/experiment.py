"""Run many (policy, autoscaler, routing, seed) simulations, in parallel when asked, and write the
outputs. A seed fixes the arrivals, so every pair of a seed sees the same requests."""

from __future__ import annotations

import multiprocessing
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from simulator.progress import WorkProgress, interleaved
from simulator.serving import report, routing_report
from simulator.serving.autoscalers import DEFAULT_AUTOSCALER
from simulator.serving.config import SimConfig
from simulator.serving.placement import POLICIES
from simulator.serving.routing import DEFAULT_ROUTING
from simulator.serving.sim import RunResult, simulate
from simulator.serving.workload import check_run_size

__all__ = [
    "Experiment",
    "run_experiment",
    "write_outputs",
    "parse_policies",
]


def parse_policies(text: str | Sequence[str]) -> list[str]:
    names = [p.strip() for p in text.split(",")] if isinstance(text, str) else list(text)
    names = [n for n in names if n]
    for n in names:
        if n not in POLICIES:
            raise ValueError(f"--policies: unknown policy {n!r} (one of {', '.join(POLICIES)})")
    if not names:
        raise ValueError("--policies: no policy given")
    return names


def _kind(job: tuple[SimConfig, str, str, str, int]) -> str:
    """A run's kind for the progress's weights: its placement x autoscaler x routing."""
    _, policy, autoscaler, routing, _ = job
    return f"{policy}/{autoscaler}/{routing}"


def _timed(job: tuple[SimConfig, str, str, str, int]) -> tuple[RunResult, float]:
    """The run and its own wall time, measured in the worker (the progress's weights)."""
    t0 = time.perf_counter()
    return _one(job), time.perf_counter() - t0


def _one(job: tuple[SimConfig, str, str, str, int]) -> RunResult:
    cfg, policy, autoscaler, routing, seed = job
    return simulate(cfg, policy, seed, autoscaler=autoscaler, routing=routing)


@dataclass
class Experiment:
    results: list[RunResult]
    rows: list[dict[str, Any]]
    summary: list[dict[str, Any]]
    wall_s: float


def run_experiment(
    cfg: SimConfig,
    policies: Sequence[str],
    seeds: Sequence[int],
    jobs: int = 1,
    progress: TextIO | None = sys.stderr,
    autoscalers: Sequence[str] = (DEFAULT_AUTOSCALER,),
    routings: Sequence[str] = (DEFAULT_ROUTING,),
) -> Experiment:
    """Every policy x autoscaler x routing x seed; results in that order whatever `jobs` is.
    A run too large to make (workload.check_run_size) is refused here, once, before any."""
    check_run_size(cfg)
    work = [
        (cfg, p, a, r, s) for p in policies for a in autoscalers for r in routings for s in seeds
    ]
    bar = WorkProgress([_kind(w) for w in work], progress, "serving")
    t0 = time.perf_counter()
    results: list[RunResult] = []
    if jobs <= 1 or len(work) == 1:
        done: dict[int, RunResult] = {}
        for k in interleaved([w[4] for w in work]):
            c, p, a, r, s = work[k]
            cb: Callable[[float], None] = partial(bar.running, _kind(work[k]))
            t_run = time.perf_counter()
            done[k] = simulate(c, p, s, progress=cb, autoscaler=a, routing=r)
            bar.finished(_kind(work[k]), time.perf_counter() - t_run)
        results = [done[k] for k in range(len(work))]
    else:
        # forkserver, not fork: forking a process that already runs threads can leave the
        # child holding a lock no thread will release (see simulator/replay/runner.py)
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["simulator.serving.experiment"])
        with ctx.Pool(min(jobs, len(work))) as pool:
            by_key: dict[tuple[str, str, str, int], RunResult] = {}
            order = [work[k] for k in interleaved([w[4] for w in work])]
            for res, seconds in pool.imap_unordered(_timed, order):
                by_key[(res.policy, res.autoscaler, res.routing, res.seed)] = res
                bar.finished(f"{res.policy}/{res.autoscaler}/{res.routing}", seconds)
            results = [by_key[(p, a, r, s)] for _, p, a, r, s in work]
    wall = time.perf_counter() - t0
    rows = [report.summarise(r) for r in results]
    return Experiment(results, rows, report.aggregate(rows), wall)


def write_outputs(
    exp: Experiment, out: Path, command: str, prefix: str = "serving_", heading: str = "##"
) -> str:
    """CSV files, plots and the Markdown section into `out`; returns the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    cmp = report.compare_rows(exp.rows)
    each = report.compare_goal(exp.rows)
    report.write_csv(out / f"{prefix}summary.csv", exp.summary)
    report.write_csv(out / f"{prefix}runs.csv", exp.rows)
    report.write_csv(out / f"{prefix}comparison.csv", cmp)
    report.write_csv(out / f"{prefix}kvspread_comparison.csv", each)
    report.write_timeline(out / f"{prefix}timeline.csv", exp.results)
    report.plot_latency(out / f"{prefix}latency.png", exp.results)
    report.plot_replicas(out / f"{prefix}replicas.png", exp.results)
    report.plot_cost(out / f"{prefix}cost.png", exp.summary, exp.rows)
    md = report.markdown_section(
        exp.summary, exp.results, command, exp.wall_s, prefix, exp.rows, cmp, heading, each
    )
    routing_cmp = routing_report.compare_routing(exp.rows)
    if routing_cmp:  # more than one routing policy ran
        report.write_csv(out / f"{prefix}routing_comparison.csv", routing_cmp)
        md += "\n" + routing_report.section(exp.summary, routing_cmp, heading + "#", prefix)
    (out / f"{prefix}report.md").write_text(md)
    return md
