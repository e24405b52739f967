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

from simulator.serving import report, routing_report
from simulator.serving.autoscalers import DEFAULT_AUTOSCALER
from simulator.serving.config import SimConfig
from simulator.serving.placement import POLICIES
from simulator.serving.routing import DEFAULT_ROUTING
from simulator.serving.sim import RunResult, simulate

__all__ = [
    "Experiment",
    "run_experiment",
    "write_outputs",
    "ProgressBar",
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


class ProgressBar:
    """A one-line progress bar on a terminal; on any other stream (a log, a pipe) one
    plain line every 10 %; silent when `stream` is None."""

    def __init__(self, total: int, stream: TextIO | None, label: str = "serving") -> None:
        self.total = total
        self.stream = stream
        self.label = label
        self.done = 0.0
        self._last = -1
        isatty = getattr(stream, "isatty", None)
        self.tty = bool(isatty()) if callable(isatty) else False

    def update(self, done: float) -> None:
        self.done = done
        if self.stream is None:
            return
        width = 30
        frac = min(1.0, done / self.total) if self.total else 1.0
        filled = int(frac * width)
        pct = int(frac * 100)
        if not self.tty:
            step = pct // 10 * 10
            if step <= self._last:
                return
            self._last = step
            self.stream.write(f"{self.label}: {step}% ({int(done)}/{self.total} runs)\n")
            self.stream.flush()
            return
        if pct == self._last:
            return
        self._last = pct
        bar = "#" * filled + "." * (width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {pct:3d}% ({int(done)}/{self.total} runs)")
        self.stream.flush()

    def close(self) -> None:
        if self.stream is not None and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _advance(bar: ProgressBar, done: int, fraction: float) -> None:
    bar.update(done + fraction)


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
    """Every policy x autoscaler x routing x seed; results in that order whatever `jobs` is."""
    work = [
        (cfg, p, a, r, s) for p in policies for a in autoscalers for r in routings for s in seeds
    ]
    bar = ProgressBar(len(work), progress)
    t0 = time.perf_counter()
    results: list[RunResult] = []
    if jobs <= 1 or len(work) == 1:
        for k, (c, p, a, r, s) in enumerate(work):
            cb: Callable[[float], None] = partial(_advance, bar, k)
            results.append(simulate(c, p, s, progress=cb, autoscaler=a, routing=r))
    else:
        # forkserver, not fork: forking a process that already runs threads can leave the
        # child holding a lock no thread will release (see simulator/replay/runner.py)
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["simulator.serving.experiment"])
        with ctx.Pool(min(jobs, len(work))) as pool:
            by_key: dict[tuple[str, str, str, int], RunResult] = {}
            for res in pool.imap_unordered(_one, work):
                by_key[(res.policy, res.autoscaler, res.routing, res.seed)] = res
                bar.update(len(by_key))
            results = [by_key[(p, a, r, s)] for _, p, a, r, s in work]
    bar.update(len(work))
    bar.close()
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
