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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from simulator.serving.sim import RunResult

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
        cell = by_qos[q]
        cell[1] += 1
        if r.status == "ok" and (r.finish - r.arrival) / max(1, r.out) <= _budget(result, q):
            cell[0] += 1
    for q in QOS_ORDER:
        met, tot = by_qos.get(q, [0, 0])
        row[f"slo_{q}"] = met / tot if tot else math.nan
    return row


def aggregate(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean over seeds per policy (policy order as first seen); adds `seeds`."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["policy"], []).append(r)
    out = []
    for policy, rs in by.items():
        agg: dict[str, Any] = {"policy": policy, "seeds": len(rs)}
        for key, value in rs[0].items():
            if key in ("policy", "seed"):
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
    head = "| policy | " + " | ".join(c[1] for c in TABLE_COLUMNS) + " |"
    sep = "|---|" + "---:|" * len(TABLE_COLUMNS)
    lines = [head, sep]
    for a in agg:
        cells = [_fmt(fmt, a.get(key)) for key, _, fmt in TABLE_COLUMNS]
        lines.append(f"| {a['policy']} | " + " | ".join(cells) + " |")
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
            ["policy", "seed", "t_s", "service", "replicas", "ready", "p95_s", "rps", "gpus_in_use"]
        )
        for res in results:
            for row in res.timeline:
                for s in row.replicas:
                    p95 = row.p95_s.get(s)
                    rps = row.rps.get(s)
                    w.writerow(
                        [
                            res.policy,
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


def _first_seed(results: Sequence[RunResult]) -> list[RunResult]:
    seen: dict[str, RunResult] = {}
    for r in results:
        if r.policy not in seen or r.seed < seen[r.policy].seed:
            seen[r.policy] = r
    return list(seen.values())


def _plt():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_latency(path: Path, results: Sequence[RunResult]) -> None:
    """p95 end-to-end latency per service over time (the adapter's SLI, 60 s window),
    one line per policy, first seed."""
    plt = _plt()
    runs = _first_seed(results)
    services = list(runs[0].config.services)
    fig, axes = plt.subplots(len(services), 1, figsize=(9, 2.4 * len(services)), sharex=True)
    axes = np.atleast_1d(axes)
    for ax, s in zip(axes, services, strict=True):
        for res in runs:
            t = [row.t / 60.0 for row in res.timeline]
            y = [np.nan if row.p95_s.get(s) is None else row.p95_s[s] for row in res.timeline]
            ax.plot(t, y, label=res.policy, linewidth=1.0)
        ax.set_ylabel(f"{s}\np95 (s)")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    axes[0].legend(loc="upper right", fontsize=8)
    axes[0].set_title(f"p95 end-to-end latency (60 s window), seed {runs[0].seed}")
    axes[-1].set_xlabel("simulated time (min)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_replicas(path: Path, results: Sequence[RunResult]) -> None:
    """Replicas set by the HPA per service and GPUs in use over time, first seed."""
    plt = _plt()
    runs = _first_seed(results)
    services = list(runs[0].config.services)
    fig, axes = plt.subplots(
        len(services) + 1, 1, figsize=(9, 2.2 * (len(services) + 1)), sharex=True
    )
    for ax, s in zip(axes[:-1], services, strict=True):
        for res in runs:
            t = [row.t / 60.0 for row in res.timeline]
            ax.step(
                t,
                [row.replicas[s] for row in res.timeline],
                where="post",
                label=res.policy,
                linewidth=1.0,
            )
        ax.set_ylabel(f"{s}\nreplicas")
        ax.grid(True, alpha=0.3)
    ax = axes[-1]
    for res in runs:
        t = [row.t / 60.0 for row in res.timeline]
        ax.step(
            t,
            [row.gpus_occupied for row in res.timeline],
            where="post",
            label=res.policy,
            linewidth=1.0,
        )
    ax.set_ylabel("GPUs in use")
    ax.grid(True, alpha=0.3)
    axes[0].legend(loc="upper left", fontsize=8)
    axes[0].set_title(f"HPA replicas and GPUs in use, seed {runs[0].seed}")
    axes[-1].set_xlabel("simulated time (min)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown_section(
    agg: Sequence[dict[str, Any]],
    results: Sequence[RunResult],
    command: str,
    wall_s: float,
    prefix: str = "serving_",
) -> str:
    """The report section (headings below '## Serving simulation' are ###)."""
    cfg = results[0].config
    seeds = sorted({r.seed for r in results})
    n_req = sum(a["requests"] * a["seeds"] for a in agg)
    c = cfg.cluster
    lines = [
        "## Serving simulation",
        "",
        f"{c.nodes} nodes x {c.gpus_per_node} {cfg.gpu.name}, services "
        + ", ".join(
            f"`{n}` ({s.kind}, {s.model}, {s.qos}, {s.gpu_memory_gib:g}Gi)"
            for n, s in cfg.services.items()
        )
        + f"; {cfg.duration_s / 3600:.2g} h simulated after {cfg.warmup_s:.0f} s warm-up, "
        f"{'seed' if len(seeds) == 1 else 'seeds'} {', '.join(map(str, seeds))}; "
        f"{cfg.arrivals.rate_rps:g} req/s base rate "
        f"(Gamma CV {cfg.arrivals.cv:g}, up to {1 + cfg.arrivals.peak_extra:g}x swell, "
        f"{cfg.arrivals.burst_factor:g}x bursts of {', '.join(cfg.arrivals.burst_kinds)}). "
        "Mean over seeds.",
        "",
        markdown_table(agg),
        "",
        "End-to-end latency: arrival to last token of completed requests. OOM: the request "
        "exceeds `max_model_len` or its instance's whole KV pool. SLO: completed with "
        "end-to-end latency / output tokens within the class budget (realtime 50 ms, batch "
        "120 ms). GPU-h (memory share): pod lifetime x its `gpu-memory` share of the GPU; GPU-h (GPUs in use): time a GPU hosts at "
        "least one model instance. Step slow-down from sharing: busy-time mean of the engines' "
        "time-slicing factor (1 + busy co-tenants on the GPU). Unschedulable pod-s: time new "
        "pods waited for a GPU with room.",
        "",
        f"![p95 latency over time]({prefix}latency.png)",
        "",
        f"![replicas over time]({prefix}replicas.png)",
        "",
        f"Command: `{command}` ({n_req:,.0f} scored requests in {wall_s:.0f} s wall, "
        f"{n_req / max(wall_s, 1e-9):,.0f} requests/s). Files: `{prefix}summary.csv`, "
        f"`{prefix}runs.csv`, `{prefix}timeline.csv`.",
        "",
    ]
    return "\n".join(lines)
