"""From runs to results: per-run metrics, the comparison table, CSV files, plots, Markdown.

Latency definitions (docs/serving-simulation.md):
- end-to-end latency: arrival at the router to the last output token, for requests that
  completed; mean and p99 are over the scored requests of a run (arrived after warm-up),
  then averaged over seeds.
- OOM rate: requests that failed because they exceed `max_model_len` or the instance's
  whole KV pool, per scored request.
- SLO compliance per QoS class: share of the class's scored requests that completed with
  end-to-end latency / output tokens <= the class budget (realtime 50 ms, batch 120 ms per
  token; best-effort: completed). Failed, aborted and unfinished requests miss.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Final

import numpy as np

from simulator.serving.sim import RunResult, TimelineRow
from simulator.serving.stats import cell, compared

__all__ = [
    "summarise",
    "aggregate",
    "TABLE_COLUMNS",
    "markdown_table",
    "write_csv",
    "write_timeline",
    "plot_latency",
    "plot_replicas",
    "markdown_section",
    "plot_cost",
    "headline",
    "comparison_table",
    "compare_rows",
    "POLICY_STYLE",
    "seed_span",
]

QOS_ORDER = ("realtime", "batch", "best-effort")


def _budget(result: RunResult, qos: str) -> float:
    slo = result.config.slo
    return {"realtime": slo.realtime_s, "batch": slo.batch_s}.get(qos, math.inf)


def summarise(result: RunResult) -> dict[str, Any]:
    """One run's metrics (flat dict, CSV-ready)."""
    cfg = result.config
    scored = [r for r in result.requests if r.arrival >= cfg.warmup_s]
    ok = [r for r in scored if r.status == "ok"]
    e2e = np.array([r.finish - r.arrival for r in ok]) if ok else np.array([math.nan])
    ttft = np.array([r.first_token - r.arrival for r in ok]) if ok else np.array([math.nan])
    n = len(scored)
    oom_len = sum(1 for r in scored if r.status == "oom-len")
    oom_kv = sum(1 for r in scored if r.status == "oom-kv")
    aborted = sum(1 for r in scored if r.status == "aborted")
    unfinished = sum(1 for r in scored if r.status == "pending")
    row: dict[str, Any] = {
        "policy": result.policy,
        "autoscaler": result.autoscaler,
        "routing": result.routing,
        "seed": result.seed,
        "requests": n,
        "completed": len(ok),
        "mean_e2e_s": float(np.mean(e2e)),
        "p50_e2e_s": float(np.percentile(e2e, 50)),
        "p95_e2e_s": float(np.percentile(e2e, 95)),
        "p99_e2e_s": float(np.percentile(e2e, 99)),
        "p99_ttft_s": float(np.percentile(ttft, 99)),
        "oom_rate": (oom_len + oom_kv) / n if n else math.nan,
        "oom_max_model_len": oom_len,
        "oom_kv_pool": oom_kv,
        "aborted": aborted,
        "unfinished": unfinished,
        "preemptions": result.preemptions,
        "failed_starts": result.start_failures,
        "gpu_hours_pods": result.pod_gpu_seconds / 3600.0,
        "gpu_hours_occupied": result.occupied_gpu_seconds / 3600.0,
        "scale_events": len(result.scale_events),
        "scale_ups": sum(1 for e in result.scale_events if e[3] > e[2]),
        "scale_downs": sum(1 for e in result.scale_events if e[3] < e[2]),
        "pending_pod_s": result.pending_pod_seconds,
        "sharing_slowdown": result.mean_sharing_factor,
        "overcommitted_placements": result.overcommits,
        "gpu_not_preferred": result.gpu_overridden,
        "sim_events": result.events,
    }
    qos_of = {name: s.qos for name, s in cfg.services.items()}
    by_qos: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in scored:
        q = qos_of[r.service]
        tally = by_qos[q]
        tally[1] += 1
        if r.status == "ok" and (r.finish - r.arrival) / max(1, r.out) <= _budget(result, q):
            tally[0] += 1
    for q in QOS_ORDER:
        met, tot = by_qos.get(q, [0, 0])
        row[f"slo_{q}"] = met / tot if tot else math.nan
    return row


def aggregate(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean over seeds per (policy, autoscaler, routing) (order as first seen); adds
    `seeds`."""
    by: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault((r["policy"], r.get("autoscaler", ""), r.get("routing", "")), []).append(r)
    out = []
    for (policy, autoscaler, routing), rs in by.items():
        agg: dict[str, Any] = {
            "policy": policy,
            "autoscaler": autoscaler,
            "routing": routing,
            "seeds": len(rs),
        }
        for key, value in rs[0].items():
            if key in ("policy", "autoscaler", "routing", "seed"):
                continue
            if isinstance(value, int | float):
                vals = [float(r[key]) for r in rs if not math.isnan(float(r[key]))]
                agg[key] = float(np.mean(vals)) if vals else math.nan
        out.append(agg)
    return out


TABLE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("mean_e2e_s", "mean e2e (s)", "{:.2f}"),
    ("p99_e2e_s", "p99 e2e (s)", "{:.1f}"),
    ("oom_rate", "OOM / request", "{:.2%}"),
    ("slo_realtime", "SLO realtime", "{:.1%}"),
    ("slo_batch", "SLO batch", "{:.1%}"),
    ("preemptions", "preemptions", "{:.0f}"),
    ("failed_starts", "failed starts", "{:.1f}"),
    ("gpu_hours_pods", "GPU-h (memory share)", "{:.1f}"),
    ("gpu_hours_occupied", "GPU-h (GPUs in use)", "{:.1f}"),
    ("scale_events", "scale events", "{:.1f}"),
    ("pending_pod_s", "unschedulable pod-s", "{:.0f}"),
    ("sharing_slowdown", "step slow-down from sharing", "{:.2f}x"),
)


def _fmt(fmt: str, v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return fmt.format(v)


def markdown_table(agg: Sequence[dict[str, Any]]) -> str:
    """One row per (policy, autoscaler[, routing]); the routing column only when the run
    has more than one routing policy."""
    routed = len({a.get("routing", "") for a in agg}) > 1
    head = "| policy | autoscaler | " + ("routing | " if routed else "")
    head += " | ".join(c[1] for c in TABLE_COLUMNS) + " |"
    sep = "|---|---|" + ("---|" if routed else "") + "---:|" * len(TABLE_COLUMNS)
    lines = [head, sep]
    for a in agg:
        cells = [_fmt(fmt, a.get(key)) for key, _, fmt in TABLE_COLUMNS]
        route = f"{a.get('routing', '')} | " if routed else ""
        lines.append(
            f"| {a['policy']} | {a.get('autoscaler', '')} | {route}" + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    if not rows:
        return
    keys: list[str] = []
    for r in rows:
        for k in r:
            if k not in keys:
                keys.append(k)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def write_timeline(path: Path, results: Sequence[RunResult]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "policy",
                "autoscaler",
                "seed",
                "t_s",
                "service",
                "replicas",
                "ready",
                "p95_s",
                "rps",
                "gpus_in_use",
            ]
        )
        for res in results:
            for row in res.timeline:
                for s in row.replicas:
                    p95 = row.p95_s.get(s)
                    rps = row.rps.get(s)
                    w.writerow(
                        [
                            res.policy,
                            res.autoscaler,
                            res.seed,
                            f"{row.t:.0f}",
                            s,
                            row.replicas[s],
                            row.ready[s],
                            "" if p95 is None else f"{p95:.4g}",
                            "" if rps is None else f"{rps:.4g}",
                            row.gpus_occupied,
                        ]
                    )


POLICY_STYLE: dict[str, tuple[str, str]] = {
    "kube-default": ("#7f7f7f", "s"),
    "round-robin": ("#1f77b4", "^"),
    "memory-weighted": ("#2ca02c", "v"),
    "kvspread": ("#d62728", "o"),
}
"""(colour, marker) per placement policy: kvspread red circles on every plot."""
AUTOSCALER_MARKER = {"none": "x", "request-rate": "s", "queue-depth": "D", "slo": "o"}


def _style(policy: str) -> tuple[str, str]:
    return POLICY_STYLE.get(policy, ("#9467bd", "P"))


def _plotted_runs(results: Sequence[RunResult]) -> list[RunResult]:
    """First seed of each policy under one autoscaler (`slo` when run): one line per
    placement policy keeps the time plots readable; the tables have every pair."""
    autoscalers = list(dict.fromkeys(r.autoscaler for r in results))
    pick = "slo" if "slo" in autoscalers else autoscalers[0]
    seen: dict[str, RunResult] = {}
    for r in results:
        if r.autoscaler != pick or r.routing != results[0].routing:
            continue
        if r.policy not in seen or r.seed < seen[r.policy].seed:
            seen[r.policy] = r
    return list(seen.values())


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _log_axis(ax) -> None:  # type: ignore[no-untyped-def]
    """Log scale with plain tick labels (0.1, 1, 10 s rather than 10^-1 ...)."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: ""))


def plot_latency(path: Path, results: Sequence[RunResult]) -> None:
    """p95 end-to-end latency per service over time (the adapter's SLI, 60 s window),
    one line per policy, first seed; the dashed line is the service's p95 target."""
    plt = _plt()
    runs = _plotted_runs(results)
    cfg = runs[0].config
    services = list(cfg.services)
    fig, axes = plt.subplots(len(services), 1, figsize=(9, 2.5 * len(services)), sharex=True)
    axes = np.atleast_1d(axes)
    for ax, s in zip(axes, services, strict=True):
        for res in runs:
            colour, marker = _style(res.policy)
            t = [row.t / 60.0 for row in res.timeline]
            y = [np.nan if row.p95_s.get(s) is None else row.p95_s[s] for row in res.timeline]
            ax.plot(
                t,
                y,
                label=res.policy,
                linewidth=1.0,
                color=colour,
                marker=marker,
                markevery=max(1, len(t) // 12),
                markersize=4,
            )
        targets = [
            m.value
            for m in cfg.services[s].metrics
            if m.metric == "kvspread_request_latency_p95_seconds"
        ]
        for v in targets:
            ax.axhline(v, color="black", linestyle="--", linewidth=0.8, label="p95 target (SLO)")
        ax.set_ylabel(f"{s}\np95 (s)")
        _log_axis(ax)
        ax.grid(True, alpha=0.3, which="both")
    axes[0].legend(loc="upper right", fontsize=7, ncol=2)
    axes[0].set_title(
        f"p95 end-to-end latency (60 s window), autoscaler {runs[0].autoscaler}, "
        f"seed {runs[0].seed}"
    )
    axes[-1].set_xlabel("simulated time (min)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _replicas(service: str, row: TimelineRow) -> int:
    return row.replicas[service]


def plot_replicas(path: Path, results: Sequence[RunResult]) -> None:
    """Replicas set by the HPA per service and GPUs in use over time, first seed."""
    plt = _plt()
    runs = _plotted_runs(results)
    services = list(runs[0].config.services)
    fig, axes = plt.subplots(
        len(services) + 1, 1, figsize=(9, 2.2 * (len(services) + 1)), sharex=True
    )
    series: list[tuple[str, Callable[[TimelineRow], int], str]] = [
        (s, partial(_replicas, s), f"{s}\nreplicas") for s in services
    ]
    series.append(("", lambda row: row.gpus_occupied, "GPUs in use"))
    for ax, (_, get, label) in zip(axes, series, strict=True):
        for res in runs:
            colour, marker = _style(res.policy)
            t = [row.t / 60.0 for row in res.timeline]
            ax.step(
                t,
                [get(row) for row in res.timeline],
                where="post",
                label=res.policy,
                linewidth=1.0,
                color=colour,
            )
            ax.plot(
                t[:: max(1, len(t) // 12)],
                [get(row) for row in res.timeline][:: max(1, len(t) // 12)],
                linestyle="none",
                marker=marker,
                color=colour,
                markersize=4,
            )
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    axes[0].legend(loc="upper left", fontsize=8)
    axes[0].set_title(
        f"HPA replicas and GPUs in use, autoscaler {runs[0].autoscaler}, seed {runs[0].seed}"
    )
    axes[-1].set_xlabel("simulated time (min)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_cost(path: Path, agg: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]]) -> None:
    """Realtime SLO attainment against GPU-hours in use, one point per (policy,
    autoscaler): mean over seeds, bars one standard deviation across seeds."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    routed = len({a.get("routing", "") for a in agg}) > 1
    for a in agg:
        vals = [
            (float(r["gpu_hours_occupied"]), float(r["slo_realtime"]))
            for r in rows
            if r["policy"] == a["policy"]
            and r["autoscaler"] == a["autoscaler"]
            and r.get("routing", "") == a.get("routing", "")
        ]
        xs, ys = np.array([v[0] for v in vals]), np.array([v[1] for v in vals])
        colour, _ = _style(a["policy"])
        marker = AUTOSCALER_MARKER.get(a["autoscaler"], "P")
        ax.errorbar(
            float(np.mean(xs)),
            100 * float(np.mean(ys)),
            xerr=float(np.std(xs)) if len(xs) > 1 else None,
            yerr=100 * float(np.std(ys)) if len(ys) > 1 else None,
            color=colour,
            marker=marker,
            markersize=7,
            linestyle="none",
            capsize=2,
            label=f"{a['policy']} + {a['autoscaler']}"
            + (f" + {a.get('routing', '')}" if routed else ""),
        )
    ax.set_xlabel("GPU-hours (GPUs hosting a model instance)")
    ax.set_ylabel("realtime SLO met (%)")
    ax.set_title("What the SLO costs: each (placement, autoscaler) pair")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


BASELINE = ("kube-default", "request-rate")
"""What the comparison is against: kube-scheduler's default scoring with a request-rate
HPA, a cluster without kvspread."""
GOAL = ("kvspread", "slo")
COMPARED: Final = compared(
    "slo_realtime", "slo_batch", "mean_e2e_s", "gpu_hours_occupied", "oom_rate", "failed_starts"
)
"""The columns of the paired comparison table."""


def compare_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Paired per-seed differences of every pair against BASELINE (simulator.serving.stats),
    under one routing policy: the first of the run (routing_report compares routings)."""
    from simulator.serving.stats import compare

    if rows:
        first = rows[0].get("routing", "")
        rows = [r for r in rows if r.get("routing", "") == first]
    return compare(rows, BASELINE, [c.metric for c in COMPARED])


def comparison_table(cmp: Sequence[dict[str, Any]]) -> str:
    """One row per pair, one column per metric: mean difference [95 % CI] verdict."""
    if not cmp:
        return ""
    pairs = list(dict.fromkeys((c["policy"], c["autoscaler"]) for c in cmp))
    by = {(c["policy"], c["autoscaler"], c["metric"]): c for c in cmp}
    head = "| policy | autoscaler | " + " | ".join(c.label for c in COMPARED) + " |"
    lines = [head, "|---|---|" + "---:|" * len(COMPARED)]
    for p, a in pairs:
        cells = [cell(by.get((p, a, c.metric)), c.factor, c.unit) for c in COMPARED]
        lines.append(f"| {p} | {a} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _find(agg: Sequence[dict[str, Any]], pair: tuple[str, str]) -> dict[str, Any] | None:
    return next((a for a in agg if (a["policy"], a.get("autoscaler")) == pair), None)


def _verdict(
    cmp: Sequence[dict[str, Any]], pair: tuple[str, str], metric: str
) -> dict[str, Any] | None:
    return next(
        (c for c in cmp if (c["policy"], c["autoscaler"]) == pair and c["metric"] == metric),
        None,
    )


def _diff_text(c: dict[str, Any] | None, factor: float, unit: str) -> str:
    if c is None or math.isnan(c["mean_diff"]):
        return "not compared"
    d = f"{c['mean_diff'] * factor:+.1f}{(' ' + unit) if unit else ''}"
    if math.isnan(c["ci_low"]):
        return f"{d} (one seed, no confidence interval)"
    word = {"no significant difference": "no significant difference"}.get(
        c["verdict"], c["verdict"]
    )
    return f"{d}, 95 % CI {c['ci_low'] * factor:+.1f} to {c['ci_high'] * factor:+.1f}: {word}"


def headline(agg: Sequence[dict[str, Any]], cmp: Sequence[dict[str, Any]]) -> list[str]:
    """Three to five plain sentences: what kvspread buys, where it loses, how sure."""
    base, goal = _find(agg, BASELINE), _find(agg, GOAL)
    seeds = int(max((a["seeds"] for a in agg), default=0))
    out: list[str] = []
    if base is None or goal is None:
        return [
            "This run does not include both kvspread + slo and the kube-default + "
            "request-rate baseline, so it makes no claim about what kvspread buys."
        ]
    out.append(
        f"kvspread placement with SLO autoscaling met the realtime SLO for "
        f"{100 * goal['slo_realtime']:.1f} % of requests, against "
        f"{100 * base['slo_realtime']:.1f} % for kube-default placement with request-rate "
        f"autoscaling ({_diff_text(_verdict(cmp, GOAL, 'slo_realtime'), 100, 'pp')})."
    )
    out.append(
        f"It used {goal['gpu_hours_occupied']:.1f} GPU-hours against "
        f"{base['gpu_hours_occupied']:.1f} "
        f"({_diff_text(_verdict(cmp, GOAL, 'gpu_hours_occupied'), 1, 'h')}), with "
        f"{100 * goal['oom_rate']:.2f} % OOM requests against {100 * base['oom_rate']:.2f} % "
        f"and {goal['failed_starts']:.1f} failed starts against {base['failed_starts']:.1f}."
    )
    placement_only = _verdict(cmp, ("kvspread", "request-rate"), "slo_realtime")
    if placement_only is not None:
        out.append(
            "Placement alone (kvspread + request-rate against the baseline) changed the "
            f"realtime SLO by {_diff_text(placement_only, 100, 'pp')}."
        )
    losses = [
        c
        for c in cmp
        if c["policy"] == "kvspread" and c["verdict"] == "worse" and c["autoscaler"] == "slo"
    ]
    best = max(agg, key=lambda a: a["slo_realtime"] if not math.isnan(a["slo_realtime"]) else -1)
    lose = []
    if losses:
        lose.append(
            "kvspread + slo is worse than the baseline on "
            + ", ".join(c.label for c in COMPARED if any(x["metric"] == c.metric for x in losses))
        )
    if (best["policy"], best["autoscaler"]) != GOAL:
        lose.append(
            f"the best realtime SLO of this run came from {best['policy']} + "
            f"{best['autoscaler']} ({100 * best['slo_realtime']:.1f} %)"
        )
    if lose:
        out.append("Where it loses: " + "; ".join(lose) + ".")
    if seeds > 1:
        out.append(
            f"How sure: {seeds} seeds; every pair ran on the same arrivals per seed, and the "
            "intervals are 95 % Student t intervals of the per-seed differences."
        )
    else:
        out.append(
            "How sure: one seed, so no confidence interval; read these as indicative and "
            "use the 10-seed tables (docs/evaluation.md) for claims."
        )
    return out


def markdown_section(
    agg: Sequence[dict[str, Any]],
    results: Sequence[RunResult],
    command: str,
    wall_s: float,
    prefix: str = "serving_",
    rows: Sequence[dict[str, Any]] = (),
    cmp: Sequence[dict[str, Any]] = (),
    heading: str = "##",
) -> str:
    """The report section: headline, setup, tables, plots, command."""
    cfg = results[0].config
    seeds = sorted({r.seed for r in results})
    n_req = sum(a["requests"] * a["seeds"] for a in agg)
    c = cfg.cluster
    seed_text = (
        f"seed {seeds[0]} (one seed: values are that run's, not means)"
        if len(seeds) == 1
        else f"seeds {seed_span(seeds)}; values are means over the {len(seeds)} seeds"
    )
    if cfg.workloads:
        from simulator.serving.workloads import describe

        traffic = describe(cfg)
    else:
        a = cfg.arrivals
        traffic = (
            f"synthetic traffic: {a.rate_rps:g} req/s base rate (Gamma CV {a.cv:g}, up to "
            f"{1 + a.peak_extra:g}x swell, {a.burst_factor:g}x bursts of "
            f"{', '.join(a.burst_kinds)})"
        )
    sharing = (
        f"{c.slots_per_gpu} time-sliced replicas per GPU"
        if c.slots_per_gpu > 1
        else "whole GPUs (a replica takes as many as its tensor-parallel degree)"
    )
    if len(set(c.nvlink)) > 1 or any(c.nvlink_island_gpus):
        nv = sum(1 for i in range(c.nodes) if c.nvlink[i % len(c.nvlink)])
        sharing += f", NVLink on {nv} of {c.nodes} nodes"
    lines = [
        f"{heading} Serving simulation",
        "",
        *([" ".join(headline(agg, cmp))] if cmp else []),
        "",
        f"{c.nodes} nodes x {c.gpus_per_node} {cfg.gpu.name}, {sharing}; services "
        + ", ".join(
            f"`{n}` ({s.kind}, {s.model}, {s.qos}, {s.gpu_memory_gib:g}Gi"
            + (
                f" on each of {s.tensor_parallel} GPUs, TP {s.tensor_parallel})"
                if s.tensor_parallel > 1
                else ")"
            )
            for n, s in cfg.services.items()
        )
        + f"; {cfg.duration_s / 3600:.2g} h simulated after {cfg.warmup_s:.0f} s warm-up; "
        f"{traffic}; {seed_text}.",
        "",
        markdown_table(agg),
        "",
        "End-to-end latency: arrival to last token of completed requests. OOM: the request "
        "exceeds `max_model_len` or its instance's whole KV pool. SLO: completed with "
        "end-to-end latency / output tokens within the class budget (realtime "
        f"{1000 * cfg.slo.realtime_s:.0f} ms, batch {1000 * cfg.slo.batch_s:.0f} ms per token). "
        "GPU-h (memory share): pod lifetime x its `gpu-memory` share of a GPU x its GPUs; GPU-h (GPUs "
        "in use): time a GPU hosts at least one model instance. Step slow-down from sharing: "
        "busy-time mean of the engines' time-slicing factor (1 + busy co-tenants on the GPU). "
        "Unschedulable pod-s: time new pods waited for a GPU with room.",
        "",
    ]
    if cmp:
        lines += [
            f"{heading}# Against kube-default + request-rate (paired by seed)",
            "",
            "Mean per-seed difference (pair minus baseline) [95 % CI] and the verdict it "
            "supports: better, worse, or n.s. (no significant difference: the interval "
            "contains 0). pp: percentage points.",
            "",
            comparison_table(cmp),
            "",
        ]
    lines += [
        f"![SLO attainment against GPU-hours]({prefix}cost.png)",
        "",
        f"![p95 latency over time]({prefix}latency.png)",
        "",
        f"![replicas over time]({prefix}replicas.png)",
        "",
        f"Command: `{command}`; {n_req:,.0f} scored requests simulated in {wall_s:.0f} s of "
        f"wall time for this section. Files: `{prefix}summary.csv`, `{prefix}runs.csv`, "
        f"`{prefix}comparison.csv`, `{prefix}timeline.csv`.",
        "",
    ]
    return "\n".join(lines)


def seed_span(seeds: Sequence[int]) -> str:
    """1,2,3,4 -> '1..4'; anything else as a comma list (what --seeds accepts)."""
    if len(seeds) > 2 and list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}..{seeds[-1]}"
    return ",".join(map(str, seeds))
