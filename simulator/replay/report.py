"""Write replay results: CSVs in the published layout, plots and a Markdown report.

Files in the output folder:
- `allocation.csv`: `workload,sc_policy,tune,seed,total_gpus,0,...,130`, one row per
  (policy, seed): GPU allocation ratio (%) at arrived demand k % (the layout of the FGD
  artifact's `analysis_allo_discrete.csv`; unallocated = 100 - value).
- `frag_ratio.csv`: `workload,sc_policy,tune,seed,0,...,130`: fragmentation ratio (%) of idle
  GPU milli (the layout of `analysis_frag_ratio_discrete.csv`).
- `unallocated.png`, `frag_ratio.png`: median over seeds per policy, band = min..max.
- `placement_comparison.csv`: every kvspread policy against every baseline policy of the run,
  paired by seed (a seed fixes the arrival sequence, so every policy of a seed places the
  same pods in the same order): per-seed difference in unallocated GPU % at 100 % and 130 %
  arrived, mean, 95 % Student t interval and verdict (simulator.serving.stats).
- `placement.md`: the verdict, the table of medians at 100 % and 130 % arrived (with the
  spread over seeds) next to the published numbers, the paired comparison, and the replay
  speed per policy.
"""

from __future__ import annotations

import csv
import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.replay.placement import ARRIVED_LEVELS, ReplayResult
from simulator.replay.policies import PUBLISHED_LABELS
from simulator.replay.trace import TRACE_DIR
from simulator.replay.workload import TUNE_RATIO
from simulator.serving.stats import COMPARABLE, cell, compared, in_words, paired

__all__ = [
    "POLICY_LABELS",
    "PUBLISHED_ALLOCATION",
    "Summary",
    "published_unallocated",
    "summarise",
    "write_allocation_csv",
    "write_frag_ratio_csv",
    "write_plots",
    "markdown_report",
    "write_report",
    "compare_placements",
    "placement_verdict",
    "write_comparison_csv",
    "PLACEMENT_COMPARED",
]

PLACEMENT_COMPARED = compared("unalloc_100", "unalloc_130")
"""The paired placement comparison's metrics: unallocated GPU % at 100 % and 130 %."""

PUBLISHED_ALLOCATION = TRACE_DIR / "simulator-expected-results" / "analysis_allo_discrete.csv"

POLICY_LABELS: dict[str, str] = {
    **PUBLISHED_LABELS,
    "kvspread": "07-kvspread",
    "kvspread-k8s": "08-kvspread-k8s",
    "kvspread-unrounded": "09-kvspread-unrounded",
}

DISPLAY_NAMES: dict[str, str] = {
    "random": "Random",
    "dotproduct": "DotProduct",
    "gpuclustering": "GpuClustering",
    "gpupacking": "GpuPacking",
    "bestfit": "BestFit",
    "fgd": "FGD",
    "kvspread": "kvspread",
    "kvspread-k8s": "kvspread + kube-scheduler defaults",
    "kvspread-unrounded": "kvspread, unrounded scores",
}

PLOT_STYLE: dict[str, tuple[str, str, str]] = {
    "random": ("#8c564b", "x", ":"),
    "dotproduct": ("#9467bd", "v", "--"),
    "gpuclustering": ("#e377c2", "<", "--"),
    "gpupacking": ("#7f7f7f", ">", "--"),
    "bestfit": ("#bcbd22", "^", "-."),
    "fgd": ("#1f77b4", "s", "-"),
    "kvspread": ("#d62728", "o", "-"),
    "kvspread-k8s": ("#ff7f0e", "D", "-"),
    "kvspread-unrounded": ("#2ca02c", "P", "-"),
}
"""(colour, marker, line style) per policy: FGD blue squares and kvspread red circles, so
the two lines that sit closest stay apart on every plot."""


def workload_name(trace: str) -> str:
    """The published `workload` column for a trace name."""
    return trace if trace.startswith("openb_pod_list_") else f"openb_pod_list_{trace}"


def _fmt(x: float) -> str:
    return "" if not math.isfinite(x) else f"{x:.2f}"


def _policies_in_order(results: Sequence[ReplayResult]) -> list[str]:
    seen: list[str] = []
    for r in results:
        if r.policy not in seen:
            seen.append(r.policy)
    return seen


def _write_runs(
    path: Path,
    results: Sequence[ReplayResult],
    header: Iterable[object],
    columns: Callable[[ReplayResult], Sequence[object]],
) -> None:
    """One row per run: workload, policy, tune and seed, then `columns(run)` under `header`."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["workload", "sc_policy", "tune", "seed", *header])
        for r in results:
            policy = POLICY_LABELS.get(r.policy, r.policy)
            w.writerow([workload_name(r.trace), policy, TUNE_RATIO, r.seed, *columns(r)])


def write_allocation_csv(results: Sequence[ReplayResult], path: Path) -> None:
    """The published `analysis_allo_discrete.csv` layout (see module docstring)."""
    _write_runs(
        path,
        results,
        ["total_gpus", *ARRIVED_LEVELS],
        lambda r: [r.total_gpus, *(_fmt(v) for v in r.allocation_columns())],
    )


def write_frag_ratio_csv(results: Sequence[ReplayResult], path: Path) -> None:
    """The published `analysis_frag_ratio_discrete.csv` layout (see module docstring)."""
    _write_runs(path, results, ARRIVED_LEVELS, lambda r: [_fmt(v) for v in r.frag_ratio_columns()])


def published_unallocated(
    path: Path = PUBLISHED_ALLOCATION,
) -> dict[tuple[str, str], tuple[float, float]]:
    """{(workload, policy name): (median unallocated % at 100 %, at 130 %)} from the
    artifact's published `analysis_allo_discrete.csv` (100 - allocation)."""
    rows: dict[tuple[str, str], list[tuple[float, float]]] = {}
    by_label = {v: k for k, v in PUBLISHED_LABELS.items()}
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            name = by_label.get(row["sc_policy"])
            if name is None or not row.get("100") or not row.get("130"):
                continue
            rows.setdefault((row["workload"], name), []).append(
                (100.0 - float(row["100"]), 100.0 - float(row["130"]))
            )
    return {
        k: (float(np.median([a for a, _ in v])), float(np.median([b for _, b in v])))
        for k, v in rows.items()
    }


@dataclass(frozen=True)
class Summary:
    """One policy's results over its seeds."""

    policy: str
    seeds: int
    unalloc_100: float  # median over seeds, %
    unalloc_130: float
    published_100: float | None
    published_130: float | None
    pods: int
    elapsed_s: float
    range_100: tuple[float, float] = (math.nan, math.nan)  # min, max over seeds, %

    @property
    def pods_per_second(self) -> float:
        return self.pods / self.elapsed_s if self.elapsed_s > 0 else math.nan


def _range(allocation: np.ndarray) -> tuple[float, float]:
    """(min, max) unallocated % over seeds from their allocation %; NaN when none."""
    vals = 100.0 - allocation[np.isfinite(allocation)]
    return (float(vals.min()), float(vals.max())) if len(vals) else (math.nan, math.nan)


def _unallocated(r: ReplayResult) -> dict[str, float]:
    cols = r.allocation_columns()
    return {"unalloc_100": 100.0 - float(cols[100]), "unalloc_130": 100.0 - float(cols[130])}


def _is_kvspread(policy: str) -> bool:
    return policy.startswith("kvspread")


def compare_placements(results: Sequence[ReplayResult]) -> list[dict[str, object]]:
    """Every kvspread policy of the run against every baseline (the policies that are not
    kvspread's: the published ones and any other), paired by seed, on
    PLACEMENT_COMPARED (lower unallocated is better): one dict per (candidate, baseline,
    metric) with `policy`, `baseline` and the `Paired.row()` columns."""
    per = {p: {r.seed: _unallocated(r) for r in results if r.policy == p} for p in
           _policies_in_order(results)}  # fmt: skip
    out: list[dict[str, object]] = []
    for cand in (p for p in per if _is_kvspread(p)):
        for base in (p for p in per if not _is_kvspread(p)):
            seeds = sorted(set(per[cand]) & set(per[base]))
            for m in PLACEMENT_COMPARED:
                c = paired(
                    m.metric,
                    [per[cand][s][m.metric] for s in seeds],
                    [per[base][s][m.metric] for s in seeds],
                )
                out.append({"policy": cand, "baseline": base, **c.row()})
    return out


def write_comparison_csv(cmp: Sequence[dict[str, object]], path: Path) -> None:
    """`placement_comparison.csv` (see module docstring); nothing when no kvspread ran."""
    if not cmp:
        return
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(cmp[0]))
        w.writeheader()
        for row in cmp:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})


def _name(policy: str) -> str:
    return DISPLAY_NAMES.get(policy, policy)


def placement_verdict(results: Sequence[ReplayResult], cmp: Sequence[dict[str, object]]) -> str:
    """One sentence: kvspread's unallocated GPU % at 100 % arrived (median and spread over
    seeds) against FGD's in words with its interval, then every other baseline grouped by
    verdict, each with its mean paired difference and 95 % interval. Empty when kvspread
    did not run."""
    summaries = {s.policy: s for s in summarise(results)}
    ks = summaries.get("kvspread")
    if ks is None:
        return ""
    spec = COMPARABLE["unalloc_100"]
    seeds = sorted({r.seed for r in results})

    def spread(s: Summary) -> str:
        lo, hi = s.range_100
        return (
            f"{s.unalloc_100:.2f} % ({lo:.2f} to {hi:.2f} over seeds)"
            if s.seeds > 1
            else (f"{s.unalloc_100:.2f} %")
        )

    mine = [c for c in cmp if c["policy"] == "kvspread" and c["metric"] == "unalloc_100"]
    text = (
        f"Placement replay (Alibaba GPU trace `{results[0].trace}`, {len(seeds)} seeds, "
        f"paired by seed): kvspread left {spread(ks)} of the GPUs unallocated at 100 % "
        "arrived demand (median)"
    )
    fgd = next((c for c in mine if c["baseline"] == "fgd"), None)
    if fgd is not None:
        text += f", FGD {spread(summaries['fgd'])}: {in_words(fgd, spec)}"
    groups: dict[str, list[str]] = {}
    for c in mine:
        if c["baseline"] == "fgd":
            continue
        verdict = "unresolved" if c["verdict"] == "inconclusive" else str(c["verdict"])
        lo, hi = float(c["ci_low"]), float(c["ci_high"])  # type: ignore[arg-type]
        interval = "" if math.isnan(lo) else f" [{lo:+.2f}, {hi:+.2f}]"
        groups.setdefault(verdict, []).append(
            f"{_name(str(c['baseline']))} {c['mean_diff']:+.2f} pp{interval}"
        )
    words = {
        "better": "better than",
        "worse": "worse than",
        "unresolved": f"unresolved by {len(seeds)} seeds against",
        "no significant difference": "no significant difference from",
    }
    said = [f"{words.get(v, v)} {', '.join(names)}" for v, names in groups.items()]
    if said:
        text += "; " + "; ".join(said)
    return text + "." + _variant_losses(cmp)


def _variant_losses(cmp: Sequence[dict[str, object]]) -> str:
    """Where the other kvspread policies of the run lose at 100 % arrived: the baselines
    each is worse than (with the interval), or possibly worse than (unresolved)."""
    from simulator.serving.stats import bad_side, brief

    spec = COMPARABLE["unalloc_100"]
    out = []
    for variant in dict.fromkeys(str(c["policy"]) for c in cmp if c["policy"] != "kvspread"):
        mine = [c for c in cmp if c["policy"] == variant and c["metric"] == "unalloc_100"]
        worse = [c for c in mine if c["verdict"] == "worse"]
        maybe = [c for c in mine if c["verdict"] == "inconclusive" and bad_side(c)]
        if not worse and not maybe:
            out.append(f"{_name(variant)} loses to no baseline here.")
            continue
        said = [f"worse than {_name(str(c['baseline']))} ({brief(c, spec)})" for c in worse]
        said += [
            f"possibly worse than {_name(str(c['baseline']))} ({brief(c, spec)})" for c in maybe
        ]
        out.append(f"{_name(variant)} loses: " + ", ".join(said) + ".")
    return (" " + " ".join(out)) if out else ""


def summarise(results: Sequence[ReplayResult]) -> list[Summary]:
    """Median unallocated GPU % per policy, with the published medians where they exist."""
    try:
        published = published_unallocated()
    except FileNotFoundError:
        published = {}
    out = []
    for policy in _policies_in_order(results):
        rs = [r for r in results if r.policy == policy]
        cols = np.array([r.allocation_columns() for r in rs])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            med = 100.0 - np.nanmedian(cols[:, [100, 130]], axis=0)
        pub = published.get((workload_name(rs[0].trace), policy))
        out.append(
            Summary(
                policy=policy,
                seeds=len(rs),
                unalloc_100=float(med[0]),
                unalloc_130=float(med[1]),
                published_100=pub[0] if pub else None,
                published_130=pub[1] if pub else None,
                pods=sum(r.pods for r in rs),
                elapsed_s=sum(r.elapsed_s for r in rs),
                range_100=_range(cols[:, 100]),
            )
        )
    return out


def write_plots(results: Sequence[ReplayResult], out_dir: Path, prefix: str = "") -> list[str]:
    """Unallocated GPU % and fragmentation ratio against arrived demand; returns file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    window = ARRIVED_LEVELS >= 80
    for kind, ylabel, fname in (
        ("unalloc", "Unallocated GPU (%)", f"{prefix}unallocated.png"),
        ("frag", "Fragmentation ratio (% of idle GPU)", f"{prefix}frag_ratio.png"),
    ):
        fig, ax = plt.subplots(figsize=(8, 4.8), dpi=110)
        top = 0.0
        for policy in _policies_in_order(results):
            rs = [r for r in results if r.policy == policy]
            if kind == "unalloc":
                data = 100.0 - np.array([r.allocation_columns() for r in rs])
            else:
                data = np.array([r.frag_ratio_columns() for r in rs])
            if np.isnan(data).all(axis=0).all():
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                med = np.nanmedian(data, axis=0)
                lo = np.nanmin(data, axis=0)
                hi = np.nanmax(data, axis=0)
            colour, marker, style = PLOT_STYLE.get(policy, ("#17becf", "*", "-"))
            (line,) = ax.plot(
                ARRIVED_LEVELS,
                med,
                label=DISPLAY_NAMES.get(policy, policy),
                color=colour,
                marker=marker,
                linestyle=style,
                markevery=max(1, len(ARRIVED_LEVELS) // 10),
                markersize=5,
                linewidth=1.6 if policy in ("fgd", "kvspread") else 1.0,
            )
            ax.fill_between(ARRIVED_LEVELS, lo, hi, color=line.get_color(), alpha=0.2)
            if np.isfinite(hi[window]).any():
                top = max(top, float(np.nanmax(hi[window])))
        ax.set_xlabel("Arrived GPU demand (% of cluster GPU capacity)")
        ax.set_ylabel(ylabel)
        if kind == "unalloc":
            ax.set_xlim(80, 130)
            ax.set_ylim(0, top * 1.1 if top > 0 else 100)
        ax.grid(alpha=0.3)
        trace = results[0].trace if results else ""
        ax.set_title(f"Alibaba GPU trace '{trace}': median over seeds, band = min..max")
        ax.legend(fontsize=8, loc="upper left")
        fig.tight_layout()
        fig.savefig(out_dir / fname)
        plt.close(fig)
        files.append(fname)
    return files


def _num(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.2f}"


def _comparison_lines(
    results: Sequence[ReplayResult], cmp: Sequence[dict[str, object]], heading: str
) -> list[str]:
    """The paired table: one row per (kvspread policy, baseline), one column per metric."""
    from simulator.serving.stats import verdict_legend

    if not cmp:
        return []
    by = {(c["policy"], c["baseline"], c["metric"]): c for c in cmp}
    rows = list(dict.fromkeys((str(c["policy"]), str(c["baseline"])) for c in cmp))
    head = "| policy | against | " + " | ".join(f"{m.label} (pp)" for m in PLACEMENT_COMPARED)
    lines = [
        "",
        f"{heading}# kvspread against each baseline (paired by seed)",
        "",
        "Per-seed difference in unallocated GPU % (kvspread minus the baseline; every policy "
        "of a seed places the same pods in the same order), mean [95 % CI] and the verdict: "
        f"{verdict_legend('at least 0.1 pp, about 6 of the 6212 GPUs')}. "
        "Means of paired differences, so they need not equal the difference of the medians "
        "above.",
        "",
        head + " |",
        "|---|---|" + "---:|" * len(PLACEMENT_COMPARED),
    ]
    for cand, base in rows:
        cells = [cell(by.get((cand, base, m.metric)), 1.0, "") for m in PLACEMENT_COMPARED]
        lines.append(f"| {_name(cand)} | {_name(base)} | " + " | ".join(cells) + " |")
    return lines


def markdown_report(
    results: Sequence[ReplayResult],
    plots: Sequence[str],
    command: str,
    wall_s: float | None = None,
    heading: str = "#",
    cmp: Sequence[dict[str, object]] | None = None,
    where: str = "",
) -> str:
    """The placement section of the report (see module docstring); `cmp` is
    `compare_placements(results)`, computed when not given; `where` prefixes every file the
    section names (the combined report keeps its parts in sub-folders)."""
    summaries = summarise(results)
    if cmp is None:
        cmp = compare_placements(results)
    verdict = placement_verdict(results, cmp)
    trace = results[0].trace if results else "?"
    seeds = sorted({r.seed for r in results})
    lines = [
        f"{heading} Placement replay: Alibaba GPU trace `{trace}`",
        "",
        *([verdict, ""] if verdict else []),
        f"Command: `{command}`",
        "",
        f"1213 GPU nodes (6212 GPUs); pods arrive until their GPU demand reaches "
        f"{TUNE_RATIO:.0%} of capacity and never leave; seeds {seeds[0]}..{seeds[-1]} "
        f"({len(seeds)}). Unallocated GPU % = 100 - allocated share of all GPUs, median over "
        "seeds, at 100 % and 130 % arrived demand. Published: the FGD artifact's "
        "`analysis_allo_discrete.csv` (Weng et al., USENIX ATC'23).",
        "",
        "| policy | unallocated @100 % | min..max over seeds @100 % | published @100 % | diff "
        "| unallocated @130 % | published @130 % |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        diff = (
            f"{s.unalloc_100 - s.published_100:+.2f}"
            if s.published_100 is not None and math.isfinite(s.unalloc_100)
            else ""
        )
        lo, hi = s.range_100
        lines.append(
            f"| {DISPLAY_NAMES.get(s.policy, s.policy)} | {_num(s.unalloc_100)} | "
            f"{_num(lo)}..{_num(hi)} | {_num(s.published_100)} | {diff} | "
            f"{_num(s.unalloc_130)} | {_num(s.published_130)} |"
        )
    lines += _comparison_lines(results, cmp, heading)
    lines += [
        "",
        "Replay speed (pods placed or rejected per second of one worker, summed over seeds):",
        "",
        "| policy | pods | seconds | pods/s |",
        "|---|---:|---:|---:|",
    ]
    for s in summaries:
        lines.append(
            f"| {DISPLAY_NAMES.get(s.policy, s.policy)} | {s.pods} | {s.elapsed_s:.1f} | "
            f"{s.pods_per_second:,.0f} |"
        )
    if wall_s is not None:
        lines += ["", f"Wall time of this replay: {wall_s:.0f} s."]
    lines += [""]
    for p in plots:
        lines += [f"![{p}]({where}{p})", ""]
    lines += [
        f"Files: `{where}allocation.csv` (published `analysis_allo_discrete.csv` layout), "
        f"`{where}frag_ratio.csv` (`analysis_frag_ratio_discrete.csv` layout)"
        + (f", `{where}placement_comparison.csv` (the paired comparison)" if cmp else "")
        + ". "
        "Method and caveats: docs/simulator.md.",
        "",
    ]
    return "\n".join(lines)


def write_report(
    results: Sequence[ReplayResult],
    out_dir: Path,
    command: str,
    wall_s: float | None = None,
    heading: str = "#",
) -> str:
    """Write the CSVs, plots and `placement.md` into `out_dir`; returns the Markdown."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_allocation_csv(results, out_dir / "allocation.csv")
    write_frag_ratio_csv(results, out_dir / "frag_ratio.csv")
    cmp = compare_placements(results)
    write_comparison_csv(cmp, out_dir / "placement_comparison.csv")
    plots = write_plots(results, out_dir)
    md = markdown_report(results, plots, command, wall_s, heading, cmp)
    (out_dir / "placement.md").write_text(md)
    return md
