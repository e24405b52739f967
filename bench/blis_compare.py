"""The figures the BLIS side-by-side check compares, their relative differences, and the
tolerance that decides its exit status.

Both simulators' figures are computed here, the same way, from per-request records
(arrival, TTFT, end-to-end latency, output tokens), so that a difference is one of the
simulators and never one of two ways of taking a percentile: BLIS's per-request results
(`blis replay --results-path`) and the serving simulation's finished requests go through
the same `figures`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "FIGURES",
    "Done",
    "Figures",
    "figures",
    "rel_diff",
    "tolerance",
    "Row",
    "within",
    "table",
]

FIGURES: tuple[tuple[str, str], ...] = (
    ("ttft_mean_ms", "mean TTFT ms"),
    ("ttft_p90_ms", "p90 TTFT ms"),
    ("tpot_mean_ms", "mean TPOT ms"),
    ("e2e_mean_ms", "mean E2E ms"),
    ("e2e_p99_ms", "p99 E2E ms"),
    ("throughput_tok_s", "throughput tok/s"),
    ("prefix_hit_rate", "prefix hit rate"),
)
"""(attribute, column title) of every compared figure, in table order."""

LOW_LOAD_TOL = 0.15
"""Largest relative difference allowed at the lower loads (issue 23, 'Done means')."""
HIGH_LOAD_TOL = 0.25
"""The same near saturation (the highest load)."""
HIT_RATE_ABS_TOL = 0.02
"""A hit rate is compared absolutely below this (0 against 0.004 is no 100 % gap)."""


@dataclass(frozen=True)
class Done:
    """One finished request: seconds since its arrival, and when it arrived."""

    arrival_s: float
    ttft_s: float
    e2e_s: float
    out: int


@dataclass(frozen=True)
class Figures:
    """One simulator's figures on one stream (times in ms, throughput in output tokens/s)."""

    ttft_mean_ms: float
    ttft_p90_ms: float
    tpot_mean_ms: float
    e2e_mean_ms: float
    e2e_p99_ms: float
    throughput_tok_s: float
    prefix_hit_rate: float
    completed: int


def figures(done: Sequence[Done], prefix_hit_rate: float) -> Figures:
    """Figures of finished requests. TPOT per request = (E2E - TTFT) / (out - 1) over
    requests with out > 1 (vLLM's benchmark_serving definition), then the mean;
    throughput = output tokens / (last finish - first arrival)."""
    if not done:
        nan = math.nan
        return Figures(nan, nan, nan, nan, nan, nan, prefix_hit_rate, 0)
    ttft = np.array([d.ttft_s for d in done]) * 1e3
    e2e = np.array([d.e2e_s for d in done]) * 1e3
    tpot = [(d.e2e_s - d.ttft_s) / (d.out - 1) * 1e3 for d in done if d.out > 1]
    start = min(d.arrival_s for d in done)
    end = max(d.arrival_s + d.e2e_s for d in done)
    tokens = sum(d.out for d in done)
    return Figures(
        ttft_mean_ms=float(ttft.mean()),
        ttft_p90_ms=float(np.percentile(ttft, 90)),
        tpot_mean_ms=float(np.mean(tpot)) if tpot else math.nan,
        e2e_mean_ms=float(e2e.mean()),
        e2e_p99_ms=float(np.percentile(e2e, 99)),
        throughput_tok_s=tokens / (end - start) if end > start else math.nan,
        prefix_hit_rate=prefix_hit_rate,
        completed=len(done),
    )


def rel_diff(ours: float, theirs: float) -> float:
    """(ours - theirs) / theirs; 0 when both are 0, inf when only theirs is."""
    if theirs == 0:
        return 0.0 if ours == 0 else math.inf
    return (ours - theirs) / abs(theirs)


def tolerance(load_index: int, loads: int) -> float:
    """The allowed relative difference at load `load_index` of `loads` (lightest first):
    25 % at the highest, 15 % below it."""
    if not 0 <= load_index < loads:
        raise ValueError(f"load index {load_index} outside 0..{loads - 1}")
    return HIGH_LOAD_TOL if load_index == loads - 1 else LOW_LOAD_TOL


def _within(name: str, ours: float, theirs: float, tol: float) -> bool:
    if name == "prefix_hit_rate" and max(abs(ours), abs(theirs)) < HIT_RATE_ABS_TOL:
        return True
    if math.isnan(ours) or math.isnan(theirs):
        return False
    return abs(rel_diff(ours, theirs)) <= tol


@dataclass(frozen=True)
class Row:
    """One (stream, load, routing) comparison."""

    stream: str
    load: str
    routing: str
    tol: float
    ours: Figures
    blis: Figures


def within(row: Row) -> list[str]:
    """The figures of `row` outside its tolerance (empty: the row passes)."""
    return [
        name
        for name, _ in FIGURES
        if not _within(name, getattr(row.ours, name), getattr(row.blis, name), row.tol)
    ]


def _cell(ours: float, theirs: float, name: str) -> str:
    if name == "prefix_hit_rate":  # a difference in percentage points
        return f"{ours:.3f} / {theirs:.3f} ({(ours - theirs) * 100:+.1f} pp)"
    if math.isnan(ours) or math.isnan(theirs):
        return f"{ours:.4g} / {theirs:.4g}"
    return f"{ours:.4g} / {theirs:.4g} ({rel_diff(ours, theirs) * 100:+.1f} %)"


def table(rows: Sequence[Row]) -> str:
    """The Markdown table: one line per row, each figure as `ours / BLIS (difference)`,
    a last column naming the figures outside tolerance."""
    head = ["stream", "load", "routing", "tol"] + [t for _, t in FIGURES] + ["outside"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r.stream, r.load, r.routing, f"{r.tol * 100:.0f} %"]
        cells += [_cell(getattr(r.ours, n), getattr(r.blis, n), n) for n, _ in FIGURES]
        bad = within(r)
        cells.append(", ".join(bad) if bad else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
