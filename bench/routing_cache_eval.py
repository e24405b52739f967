"""The routing comparison of issue 24 (point 5 and its Goals) from serving-simulation runs.

    python3 bench/routing_cache_eval.py DIR [DIR ...]

Each DIR is the output folder (`--out`) of one `kvspread simulate serving` run at one load
with `--routing round-robin,least-request,llm-d,kvspread` and several seeds. Prints one
table of every folder (load x routing), then per folder each policy's seed means of TTFT
p50/p90, E2E p99 and SLO goodput per GPU-hour, then kvspread's paired difference against each other policy (kvspread - other, mean over seeds
[95 % Student t interval], verdict from kvspread's side: `simulator.serving.stats.paired`),
then each policy's prefix-cache hit rate, then the issue's goals checked on the seed means:
TTFT p90 <= min(llm-d, least-request) and <= 0.7 x round-robin; goodput per GPU-hour >= both;
E2E p99 no worse (its paired interval not wholly on the worse side) than either.
Why a separate script: the simulator's own report pairs every policy against round-robin;
the goals are stated against kvspread's two strongest rivals.
"""

from __future__ import annotations

import csv
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

from simulator.serving.stats import COMPARABLE, cell, paired

METRICS = ("p50_ttft_s", "p90_ttft_s", "p99_e2e_s", "slo_goodput_per_gpu_hour")
SHOWN = ("prefix_hit_rate",)
"""Read and printed as seed means, not paired: what the caches found under each routing."""
ORDER = ("round-robin", "least-request", "llm-d", "kvspread")
BOUND_ROWS = 10_000
"""Rows read per runs file at most (4 policies x 10 seeds is 40)."""


def read_runs(folder: Path) -> dict[str, dict[int, dict[str, float]]]:
    """routing -> seed -> the compared metrics, from `serving_runs.csv`."""
    path = folder / "serving_runs.csv"
    if not path.is_file():
        raise SystemExit(
            f"error: {path}: no serving_runs.csv (give a simulate serving --out folder)"
        )
    out: dict[str, dict[int, dict[str, float]]] = defaultdict(dict)
    with path.open(newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            if i >= BOUND_ROWS:
                raise SystemExit(f"error: {path}: more than {BOUND_ROWS} rows")
            out[row["routing"]][int(row["seed"])] = {
                m: float(row.get(m) or "nan") for m in METRICS + SHOWN
            }
    return out


def mean(xs: list[float]) -> float:
    kept = [x for x in xs if not math.isnan(x)]
    return sum(kept) / len(kept) if kept else math.nan


class Load(NamedTuple):
    """One folder's seed means per routing, and kvspread's paired comparison against each
    other routing (routing -> metric -> `Paired.row()`)."""

    name: str
    seeds: int
    means: dict[str, dict[str, float]]
    pairs: dict[str, dict[str, dict[str, object]]]


def load(folder: Path) -> Load:
    """Read one folder and pair kvspread against every other routing, seed by seed."""
    runs = read_runs(folder)
    ks = runs.get("kvspread")
    if not ks:
        raise SystemExit(f"error: {folder}: no kvspread runs")
    seeds = sorted(ks)
    means = {
        r: {m: mean([runs[r][s][m] for s in seeds if s in runs[r]]) for m in METRICS + SHOWN}
        for r in ORDER
        if r in runs
    }
    pairs: dict[str, dict[str, dict[str, object]]] = {}
    for r in means:
        if r != "kvspread":
            both = [s for s in seeds if s in runs[r]]
            pairs[r] = {
                m: paired(m, [ks[s][m] for s in both], [runs[r][s][m] for s in both]).row()
                for m in METRICS
            }
    return Load(folder.name, len(seeds), means, pairs)


def _means_cells(row: dict[str, float]) -> list[str]:
    return [
        f"{row['p50_ttft_s']:.2f}",
        f"{row['p90_ttft_s']:.2f}",
        f"{row['p99_e2e_s']:.1f}",
        f"{row['slo_goodput_per_gpu_hour']:,.0f}",
    ]


def _pair_cells(ld: Load, r: str) -> list[str]:
    if r not in ld.pairs:
        return ["-"] * len(METRICS)
    return [cell(ld.pairs[r][m], COMPARABLE[m].factor, COMPARABLE[m].unit) for m in METRICS]


def combined(loads: list[Load]) -> list[str]:
    """One table, load x routing: seed means, then kvspread - that routing [95 % CI]."""
    labels = [COMPARABLE[m].label for m in METRICS]
    lines = [
        "| load | routing | p50 TTFT (s) | p90 TTFT (s) | p99 E2E (s) | SLO goodput / GPU-h | "
        + " | ".join(f"kvspread - it: {x}" for x in labels)
        + " |",
        "|---|---|" + "---:|" * (2 * len(METRICS)),
    ]
    for ld in loads:
        for r, row in ld.means.items():
            cells = [ld.name, r, *_means_cells(row), *_pair_cells(ld, r)]
            lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def report(ld: Load) -> list[str]:
    """The Markdown tables and goal lines of one load."""
    means = ld.means
    lines = [
        f"### {ld.name} ({ld.seeds} seeds)",
        "",
        "| routing | p50 TTFT (s) | p90 TTFT (s) | p99 E2E (s) | SLO goodput / GPU-h |",
        "|---|---:|---:|---:|---:|",
    ]
    for r, row in means.items():
        lines.append(f"| {r} | " + " | ".join(_means_cells(row)) + " |")
    lines += [
        "",
        "| kvspread - | " + " | ".join(COMPARABLE[m].label for m in METRICS) + " |",
        "|---|" + "---:|" * len(METRICS),
    ]
    for r in ld.pairs:
        lines.append(f"| {r} | " + " | ".join(_pair_cells(ld, r)) + " |")
    verdicts = {(r, m): str(c["verdict"]) for r, by in ld.pairs.items() for m, c in by.items()}
    k = means["kvspread"]
    rivals = [r for r in ("llm-d", "least-request") if r in means]
    goals = []
    if rivals:
        best = min(means[r]["p90_ttft_s"] for r in rivals)
        goals.append(
            (
                "TTFT p90 <= min(llm-d, least-request)",
                k["p90_ttft_s"] <= best,
                f"{k['p90_ttft_s']:.2f} vs {best:.2f} s",
            )
        )
    if "round-robin" in means:
        rr = means["round-robin"]["p90_ttft_s"]
        goals.append(
            (
                "TTFT p90 <= 0.7 x round-robin",
                k["p90_ttft_s"] <= 0.7 * rr,
                f"{k['p90_ttft_s']:.3f} vs {0.7 * rr:.3f} s",
            )
        )
    if rivals:
        top = max(means[r]["slo_goodput_per_gpu_hour"] for r in rivals)
        goals.append(
            (
                "goodput / GPU-h >= llm-d and least-request",
                k["slo_goodput_per_gpu_hour"] >= top,
                f"{k['slo_goodput_per_gpu_hour']:,.0f} vs {top:,.0f}",
            )
        )
        worse = [r for r in rivals if verdicts.get((r, "p99_e2e_s")) == "worse"]
        goals.append(
            (
                "E2E p99 no worse (paired)",
                not worse,
                "worse than " + ", ".join(worse) if worse else "not worse than either",
            )
        )
    hits = " / ".join(f"{r} {100 * row['prefix_hit_rate']:.1f} %" for r, row in means.items())
    lines += ["", f"Prefix-cache hit rate (share of prompt tokens found cached): {hits}", ""]
    lines += [f"- {name}: {'met' if ok else 'NOT met'} ({how})" for name, ok, how in goals]
    return lines + [""]


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    loads = [load(Path(d)) for d in argv]
    print("\n".join(combined(loads)))
    for ld in loads:
        print("\n".join(report(ld)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
