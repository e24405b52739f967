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
- TTFT: arrival to first output token, completed requests; p50/p90/p99 over a run's scored
  requests. TPOT: (end-to-end - TTFT) / (output tokens - 1), per completed request with at
  least 2 output tokens, then mean/p90/p99 over them (vLLM's `vllm/benchmarks/serve.py`
  definition).
- SLO goodput per GPU-hour (`slo_goodput_per_gpu_hour`): scored requests that met their
  class's latency budget (realtime and batch; best-effort has no budget and is left out of
  both sides, as BLIS leaves a class without SLO targets out), divided by the GPU-hours in
  use over the scored window, the end of the warm-up to the end of the arrivals
  (`gpu_hours_scored`: each GPU counts while at least one model-instance pod is bound to
  it, loading, serving or draining: the provisioned GPUs Dynamo's planner evaluation
  averages as `avg_gpu`; not the whole cluster, not the memory share). `slo_goodput_rps`
  is the same count per second of the scored window (BLIS's `goodput_rps`).
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
from simulator.serving.workload import Request

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
    "cost_figure",
    "latency_figure",
    "mean_ci95",
    "headline",
    "users_table",
    "USER_COLUMNS",
    "opening_text",
    "compare_goal",
    "goal_baselines",
    "comparison_table",
    "compare_rows",
    "POLICY_STYLE",
    "seed_span",
    "cache_summary",
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
        **_ttft_tpot(ok),
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
    row.update(_goodput(result, sum(by_qos[q][0] for q in BUDGETED_QOS if q in by_qos)))
    row.update(cache_summary(scored))
    return row


def _share(hit: float, total: float) -> float:
    return hit / total if total > 0 else math.nan


def cache_summary(scored: Sequence[Request]) -> dict[str, float]:
    """The engines' caches over the scored requests (NaN where no request carried the ids
    a cache needs, so nothing could be measured).

    `prefix_hit_rate`: prompt tokens found in the prefix cache / tokens looked up, summed
    over admissions (vLLM's prefix_cache_hits / prefix_cache_queries); the same per
    replica gives its lowest and highest. `encoder_cache_hit_rate`: images whose encoder
    output was still cached / images that needed one (those inside the cached prefix need
    none and are counted apart, `images_in_cached_prefix`).
    """
    per: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    q = h = 0
    for r in scored:
        if r.prefix_query_tokens:
            q += r.prefix_query_tokens
            h += r.prefix_hit_tokens
            tally = per[(r.service, r.instance)]
            tally[0] += r.prefix_hit_tokens
            tally[1] += r.prefix_query_tokens
    rates = [hit / tot for hit, tot in per.values()]
    with_ids = [r for r in scored if r.image_ids]
    enc_hits = sum(r.images_encoder_hits for r in with_ids)
    needed = enc_hits + sum(r.images_encoded for r in with_ids)
    return {
        "prefix_hit_rate": _share(h, q),
        "prefix_hit_tokens_per_request": _share(h, sum(1 for r in scored if r.block_hashes)),
        "prefix_hit_rate_min_replica": min(rates) if rates else math.nan,
        "prefix_hit_rate_max_replica": max(rates) if rates else math.nan,
        "encoder_cache_hit_rate": _share(enc_hits, needed),
        "images_in_cached_prefix": float(sum(r.images_prefix for r in with_ids))
        if with_ids
        else math.nan,
    }


BUDGETED_QOS = ("realtime", "batch")
"""The classes with a latency budget: their requests count in the SLO goodput."""


def _ttft_tpot(ok: Sequence[Request]) -> dict[str, float]:
    """TTFT p50/p90/p99 and TPOT mean/p90/p99 of completed requests (module docstring)."""
    ttft = np.array([r.first_token - r.arrival for r in ok]) if ok else np.array([math.nan])
    multi = [r for r in ok if r.out > 1]
    tpot = (
        np.array([(r.finish - r.first_token) / (r.out - 1) for r in multi])
        if multi
        else np.array([math.nan])
    )
    p50, p90, p99 = (float(v) for v in np.percentile(ttft, [50, 90, 99]))
    t90, t99 = (float(v) for v in np.percentile(tpot, [90, 99]))
    return {
        "p50_ttft_s": p50,
        "p90_ttft_s": p90,
        "p99_ttft_s": p99,
        "mean_tpot_s": float(np.mean(tpot)),
        "p90_tpot_s": t90,
        "p99_tpot_s": t99,
    }


def _goodput(result: RunResult, good: int) -> dict[str, float]:
    """SLO goodput per GPU-hour in use and per second, over the scored window (module
    docstring): the timeline's GPUs-in-use samples in (warm-up, warm-up + duration], each
    standing for the timeline step before it, as the run's own GPU-seconds counter does."""
    cfg = result.config
    step = cfg.timeline_step_s
    end = cfg.warmup_s + cfg.duration_s
    gpu_s = sum(row.gpus_occupied * step for row in result.timeline if cfg.warmup_s < row.t <= end)
    window = cfg.duration_s
    return {
        "slo_good_requests": good,
        "gpu_hours_scored": gpu_s / 3600.0,
        "slo_goodput_per_gpu_hour": good / (gpu_s / 3600.0) if gpu_s > 0 else math.nan,
        "slo_goodput_rps": good / window if window > 0 else math.nan,
    }


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
    if fmt == "ms":
        return f"{1000 * v:.1f}"
    return fmt.format(v)


def markdown_table(
    agg: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str]] = TABLE_COLUMNS
) -> str:
    """One row per (policy, autoscaler[, routing]) with `columns` (key, title, format; the
    format "ms" shows seconds in milliseconds); the routing column only when the run has
    more than one routing policy."""
    routed = len({a.get("routing", "") for a in agg}) > 1
    head = "| policy | autoscaler | " + ("routing | " if routed else "")
    head += " | ".join(c[1] for c in columns) + " |"
    sep = "|---|---|" + ("---|" if routed else "") + "---:|" * len(columns)
    lines = [head, sep]
    for a in agg:
        cells = [_fmt(fmt, a.get(key)) for key, _, fmt in columns]
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


def _per_token_p95(
    res: RunResult, service: str, window_s: float = 60.0
) -> tuple[list[float], list[float]]:
    """(minutes, p95 of end-to-end latency per output token) of the completed requests of
    `service` that finished in each `window_s` window: the quantity the SLO scores."""
    done = [
        (r.finish, (r.finish - r.arrival) / max(1, r.out))
        for r in res.requests
        if r.service == service and r.status == "ok"
    ]
    if not done:
        return [], []
    finish = np.array([d[0] for d in done])
    per_tok = np.array([d[1] for d in done])
    edges = np.arange(0.0, float(finish.max()) + window_s, window_s)
    which = np.digitize(finish, edges)
    t, y = [], []
    for k in range(1, len(edges) + 1):
        sel = per_tok[which == k]
        if len(sel):
            t.append(float(edges[k - 1] + window_s) / 60.0)
            y.append(float(np.percentile(sel, 95)))
    return t, y


def plot_latency(path: Path, results: Sequence[RunResult]) -> None:
    """`latency_figure` saved to `path`."""
    _save(latency_figure(results), path)


def _save(fig: Any, path: Path) -> None:
    fig.savefig(path, dpi=110)
    _plt().close(fig)


def latency_figure(results: Sequence[RunResult]) -> Any:
    """Per service, two panels, one line per policy, first seed: left, p95 end-to-end latency
    (the adapter's SLI, 60 s window) with the HPA's p95 target dashed; right, p95 latency per
    output token of the requests finished in each 60 s with the scored SLO budget dashed."""
    plt = _plt()
    runs = _plotted_runs(results)
    cfg = runs[0].config
    services = list(cfg.services)
    fig, axes = plt.subplots(
        len(services), 2, figsize=(12, 2.6 * len(services)), sharex=True, squeeze=False
    )
    for (ax, tok_ax), s in zip(axes, services, strict=True):
        for res in runs:
            colour, marker = _style(res.policy)
            t = [row.t / 60.0 for row in res.timeline]
            y = [np.nan if row.p95_s.get(s) is None else row.p95_s[s] for row in res.timeline]
            style = {
                "label": res.policy,
                "linewidth": 1.0,
                "color": colour,
                "marker": marker,
                "markersize": 4,
            }
            ax.plot(t, y, markevery=max(1, len(t) // 12), **style)
            tt, ty = _per_token_p95(res, s)
            tok_ax.plot(tt, [1000 * v for v in ty], markevery=max(1, len(tt) // 12), **style)
        targets = [
            m.value
            for m in cfg.services[s].metrics
            if m.metric == "kvspread_request_latency_p95_seconds"
        ]
        for v in targets:
            ax.axhline(
                v, color="black", linestyle="--", linewidth=0.8, label=f"HPA p95 target {v:g} s"
            )
        budget = _budget(runs[0], cfg.services[s].qos)
        if math.isfinite(budget):
            tok_ax.axhline(
                1000 * budget,
                color="black",
                linestyle="--",
                linewidth=0.8,
                label=f"scored SLO {1000 * budget:g} ms / token",
            )
        ax.set_ylabel(f"{s}\np95 e2e (s)")
        tok_ax.set_ylabel("p95 e2e per token (ms)")
        for a in (ax, tok_ax):
            _log_axis(a)
            a.grid(True, alpha=0.3, which="both")
            a.legend(loc="upper right", fontsize=6, ncol=2)
    axes[0][0].set_title("p95 end-to-end latency (60 s window); dashed: HPA target", fontsize=9)
    axes[0][1].set_title(
        "p95 latency per output token (requests finished per 60 s); dashed: scored SLO",
        fontsize=9,
    )
    fig.suptitle(f"autoscaler {runs[0].autoscaler}, seed {runs[0].seed}", fontsize=10)
    for a in axes[-1]:
        a.set_xlabel("simulated time (min)")
    fig.tight_layout()
    return fig


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


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
    """(mean, half-width of its 95 % Student t interval) of per-seed values; half-width
    NaN with fewer than two."""
    from simulator.serving.stats import t_quantile_975

    xs = np.array([v for v in values if not math.isnan(v)], dtype=float)
    if len(xs) == 0:
        return math.nan, math.nan
    if len(xs) < 2:
        return float(xs[0]), math.nan
    half = t_quantile_975(len(xs) - 1) * float(np.std(xs, ddof=1)) / math.sqrt(len(xs))
    return float(np.mean(xs)), half


def plot_cost(path: Path, agg: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]]) -> None:
    """`cost_figure` saved to `path`."""
    _save(cost_figure(agg, rows), path)


def cost_figure(agg: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]]) -> Any:
    """Realtime SLO attainment against GPU-hours in use, one point per (policy,
    autoscaler): mean over seeds, bars the 95 % confidence interval of that mean (Student t
    over the seeds, each pair on its own), as the legend and the report say."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    routed = len({a.get("routing", "") for a in agg}) > 1
    n_seeds = 0
    for a in agg:
        vals = [
            (float(r["gpu_hours_occupied"]), float(r["slo_realtime"]))
            for r in rows
            if r["policy"] == a["policy"]
            and r["autoscaler"] == a["autoscaler"]
            and r.get("routing", "") == a.get("routing", "")
        ]
        n_seeds = max(n_seeds, len(vals))
        x, xh = mean_ci95([v[0] for v in vals])
        y, yh = mean_ci95([v[1] for v in vals])
        colour, _ = _style(a["policy"])
        marker = AUTOSCALER_MARKER.get(a["autoscaler"], "P")
        ax.errorbar(
            x,
            100 * y,
            xerr=None if math.isnan(xh) else xh,
            # a share's interval is drawn within 0..100 %
            yerr=None if math.isnan(yh) else [[100 * min(yh, y)], [100 * min(yh, 1.0 - y)]],
            color=colour,
            marker=marker,
            markersize=7,
            linestyle="none",
            capsize=2,
            label=f"{a['policy']} + {a['autoscaler']}"
            + (f" + {a.get('routing', '')}" if routed else ""),
        )
    ax.set_xlabel("GPU-hours in use (GPUs hosting a model instance; gpu_hours_occupied)")
    ax.set_ylabel("realtime SLO met (%)")
    bars = (
        f"bars: 95 % CI of the mean over {n_seeds} seeds (Student t; SLO bars cut at 100 %)"
        if n_seeds > 1
        else "one seed: no bars"
    )
    ax.set_title(f"What the SLO costs: each (placement, autoscaler) pair\n{bars}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="best")
    fig.tight_layout()
    return fig


BASELINE = ("kube-default", "request-rate")
"""What the comparison is against: kube-scheduler's default scoring with a request-rate
HPA, a cluster without kvspread."""
GOAL = ("kvspread", "slo")
PLACEMENT_ONLY = ("kvspread", "request-rate")
COMPARED: Final = compared(
    "slo_realtime",
    "slo_batch",
    "slo_goodput_per_gpu_hour",
    "mean_e2e_s",
    "p90_ttft_s",
    "mean_tpot_s",
    "gpu_hours_occupied",
    "oom_rate",
    "failed_starts",
)
"""The columns of the paired comparison tables (and what "where it loses" looks at)."""
CSV_COMPARED: Final = COMPARED + compared(
    "p50_ttft_s", "p99_ttft_s", "p90_tpot_s", "p99_tpot_s", "p99_e2e_s"
)
"""What the comparison CSVs hold: the tables' metrics, then the other TTFT and TPOT
percentiles and the p99 end-to-end latency."""


def _first_routing(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of the run's first routing policy (routing_report compares routings)."""
    if not rows:
        return []
    first = rows[0].get("routing", "")
    return [r for r in rows if r.get("routing", "") == first]


def compare_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Paired per-seed differences of every pair against BASELINE (simulator.serving.stats),
    under one routing policy: the first of the run (routing_report compares routings)."""
    from simulator.serving.stats import compare

    return compare(_first_routing(rows), BASELINE, [c.metric for c in CSV_COMPARED])


def goal_baselines(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """What kvspread + slo is held against for "where it loses": BASELINE, then every other
    placement policy of the run under the same autoscaler (slo), in the run's order."""
    pairs = list(dict.fromkeys((str(r["policy"]), str(r["autoscaler"])) for r in rows))
    same = [p for p in pairs if p[1] == GOAL[1] and p != GOAL and p != BASELINE]
    return [p for p in [BASELINE, *same] if p in pairs]


def compare_goal(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """kvspread + slo against each of `goal_baselines`, paired by seed, one dict per
    (baseline, metric) with `baseline_policy` and `baseline_autoscaler` columns; empty when
    the run has no kvspread + slo."""
    from simulator.serving.stats import compare

    rows = _first_routing(rows)
    if not any((r["policy"], r["autoscaler"]) == GOAL for r in rows):
        return []
    out: list[dict[str, Any]] = []
    for base in goal_baselines(rows):
        for c in compare(rows, base, [m.metric for m in CSV_COMPARED]):
            if (c["policy"], c["autoscaler"]) == GOAL:
                out.append({**c, "baseline_policy": base[0], "baseline_autoscaler": base[1]})
    return out


def comparison_table(cmp: Sequence[dict[str, Any]], against: bool = False) -> str:
    """One row per pair, one column per metric: mean difference [95 % CI] verdict. With
    `against`, one row per baseline of `compare_goal` instead."""
    if not cmp:
        return ""
    if against:
        keys = list(dict.fromkeys((c["baseline_policy"], c["baseline_autoscaler"]) for c in cmp))
        by = {(c["baseline_policy"], c["baseline_autoscaler"], c["metric"]): c for c in cmp}
        first = "| against | autoscaler | "
    else:
        keys = list(dict.fromkeys((c["policy"], c["autoscaler"]) for c in cmp))
        by = {(c["policy"], c["autoscaler"], c["metric"]): c for c in cmp}
        first = "| policy | autoscaler | "
    head = first + " | ".join(f"{c.label} ({c.unit})" if c.unit else c.label for c in COMPARED)
    lines = [head + " |", "|---|---|" + "---:|" * len(COMPARED)]
    for p, a in keys:
        cells = [cell(by.get((p, a, c.metric)), c.factor, "") for c in COMPARED]
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


def _value(metric: str, v: float) -> str:
    """A summary value as the opening shows it."""
    if math.isnan(v):
        return "-"
    if metric.startswith("slo_") and metric != "slo_goodput_per_gpu_hour":
        return f"{100 * v:.1f} %"
    if metric == "slo_goodput_per_gpu_hour":
        return f"{v:,.0f}"
    if metric.endswith("_tpot_s"):
        return f"{1000 * v:.1f}"
    return f"{v:.2f}"


_OPENING_UNIT = {
    "slo_realtime": "",
    "gpu_hours_occupied": " GPU-h",
    "slo_goodput_per_gpu_hour": " requests within SLO per GPU-hour",
    "p90_ttft_s": " s",
    "mean_tpot_s": " ms",
}


OPENING_METRICS = (
    ("slo_realtime", "realtime SLO met"),
    ("gpu_hours_occupied", "GPU-hours in use"),
    ("slo_goodput_per_gpu_hour", "SLO goodput"),
    ("p90_ttft_s", "p90 TTFT"),
    ("mean_tpot_s", "mean TPOT"),
)
"""What the opening's first sentence states for kvspread + slo against the baseline."""


def _losses(each: Sequence[dict[str, Any]]) -> str:
    """'Where it loses': per baseline of `compare_goal`, the metrics kvspread + slo is worse
    on (with the interval), then those pointing the bad way that this run cannot resolve
    (with the seeds that would). It reads the tables' metrics (COMPARED), not every
    percentile of the CSVs, so that one latency loss is not said three times."""
    from simulator.serving.stats import COMPARABLE, bad_side, brief

    shown = {c.metric for c in COMPARED}
    parts = []
    for bp, ba in dict.fromkeys((c["baseline_policy"], c["baseline_autoscaler"]) for c in each):
        mine = [
            c
            for c in each
            if (c["baseline_policy"], c["baseline_autoscaler"]) == (bp, ba) and c["metric"] in shown
        ]
        worse = [brief(c, COMPARABLE[c["metric"]]) for c in mine if c["verdict"] == "worse"]
        maybe = [
            brief(c, COMPARABLE[c["metric"]])
            for c in mine
            if c["verdict"] == "inconclusive" and bad_side(c)
        ]
        said = []
        if worse:
            said.append("worse on " + ", ".join(worse))
        if maybe:
            said.append("possibly worse, unresolved, on " + ", ".join(maybe))
        parts.append(
            f"against {bp} + {ba}, "
            + ("; ".join(said) if said else "no loss on the compared metrics")
        )
    return ("Where kvspread + slo loses: " + "; ".join(parts) + ".") if parts else ""


def headline(
    agg: Sequence[dict[str, Any]],
    cmp: Sequence[dict[str, Any]],
    each: Sequence[dict[str, Any]] = (),
) -> list[str]:
    """The opening, four or five plain sentences: what kvspread + slo buys against the
    baseline, placement alone, where kvspread loses against each baseline (`each`, from
    `compare_goal`), how sure. An unresolved difference is said to be one, with the seeds
    it needs, never called "no significant difference"."""
    from simulator.serving.stats import COMPARABLE, in_words

    base, goal = _find(agg, BASELINE), _find(agg, GOAL)
    seeds = int(max((a["seeds"] for a in agg), default=0))
    out: list[str] = []
    if base is None or goal is None:
        return [
            "This run does not include both kvspread + slo and the kube-default + "
            "request-rate baseline, so it makes no claim about what kvspread buys."
        ]
    said = []
    for metric, label in OPENING_METRICS:
        spec = COMPARABLE[metric]
        said.append(
            f"{label} {_value(metric, goal.get(metric, math.nan))} against "
            f"{_value(metric, base.get(metric, math.nan))}{_OPENING_UNIT[metric]} "
            f"({in_words(_verdict(cmp, GOAL, metric), spec)})"
        )
    out.append(
        "kvspread placement with SLO autoscaling (kvspread + slo) against kube-default "
        "placement with request-rate autoscaling (kube-default + request-rate, no kvspread): "
        + "; ".join(said)
        + "."
    )
    if _find(agg, PLACEMENT_ONLY) is not None:
        alone = [
            f"{COMPARABLE[m].label} {in_words(_verdict(cmp, PLACEMENT_ONLY, m), COMPARABLE[m])}"
            for m in ("slo_realtime", "gpu_hours_occupied", "slo_goodput_per_gpu_hour")
        ]
        out.append(
            "Placement alone (kvspread + request-rate against the baseline): "
            + "; ".join(alone)
            + "."
        )
    loses = _losses(each)
    if loses:
        out.append(loses)
    if seeds > 1:
        out.append(
            f"How sure: {seeds} seeds; every pair ran on the same arrivals per seed; the "
            "intervals are 95 % Student t intervals of the per-seed differences; "
            f'"{seeds} seeds cannot tell" and "unresolved" mean the difference is material '
            'but this run is too small to decide, not that there is none, and "~N" is about '
            "how many seeds would decide it if the per-seed spread stays as observed "
            "(docs/evaluation.md has the 10-seed tables)."
        )
    else:
        out.append(
            "How sure: one seed, so no confidence interval; read these as indicative and "
            "use the 10-seed tables (docs/evaluation.md) for claims."
        )
    return out


USER_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("slo_goodput_per_gpu_hour", "SLO goodput (req / GPU-h)", "{:,.0f}"),
    ("slo_good_requests", "requests within SLO", "{:,.0f}"),
    ("gpu_hours_scored", "GPU-h in use, scored window", "{:.2f}"),
    ("p50_ttft_s", "p50 TTFT (s)", "{:.2f}"),
    ("p90_ttft_s", "p90 TTFT (s)", "{:.2f}"),
    ("p99_ttft_s", "p99 TTFT (s)", "{:.2f}"),
    ("mean_tpot_s", "mean TPOT (ms)", "ms"),
    ("p90_tpot_s", "p90 TPOT (ms)", "ms"),
    ("p99_tpot_s", "p99 TPOT (ms)", "ms"),
)
"""The second table: what users compare serving systems by (SLO goodput per GPU-hour as
Dynamo's planner evaluation and BLIS report it, TTFT and TPOT percentiles)."""


def users_table(agg: Sequence[dict[str, Any]]) -> str:
    """One row per (policy, autoscaler[, routing]) with USER_COLUMNS."""
    return markdown_table(agg, USER_COLUMNS)


def opening_text(sentences: Sequence[str]) -> str:
    """The opening as Markdown: one bullet per sentence."""
    return "\n".join(f"- {s}" for s in sentences)


def markdown_section(
    agg: Sequence[dict[str, Any]],
    results: Sequence[RunResult],
    command: str,
    wall_s: float,
    prefix: str = "serving_",
    rows: Sequence[dict[str, Any]] = (),
    cmp: Sequence[dict[str, Any]] = (),
    heading: str = "##",
    each: Sequence[dict[str, Any]] = (),
    opening: bool = True,
) -> str:
    """The report section: opening (unless `opening` is False: the combined report puts
    it at its top), setup, tables, plots, command. `prefix` starts every file name the
    section names."""
    from simulator.serving import slo_goal
    from simulator.serving.stats import VERDICT_LEGEND

    sentences = (headline(agg, cmp, each) if cmp else []) + slo_goal.opening(rows)
    sentences = sentences if opening else []

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
    budgets = (
        f"realtime {1000 * cfg.slo.realtime_s:.0f} ms, batch {1000 * cfg.slo.batch_s:.0f} ms "
        "per output token"
    )
    lines = [
        f"{heading} Serving simulation",
        "",
        *([opening_text(sentences), ""] if sentences else []),
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
        f"end-to-end latency / output tokens within the class budget ({budgets}). "
        "GPU-h (memory share): pod lifetime x its `gpu-memory` share of a GPU x its GPUs; "
        "GPU-h (GPUs in use): time a GPU hosts at least one model instance, whole run. Step "
        "slow-down from sharing: busy-time mean of the engines' time-slicing factor (1 + busy "
        "co-tenants on the GPU). Unschedulable pod-s: time new pods waited for a GPU with "
        "room.",
        "",
        f"{heading}# What users compare: SLO goodput per GPU-hour, TTFT, TPOT",
        "",
        users_table(agg),
        "",
        "SLO goodput: scored requests of the classes with a latency budget (realtime, batch) "
        "that completed within it, per GPU-hour in use over the scored window (end of warm-up "
        "to the end of the arrivals; a GPU counts while a model-instance pod is bound to it: the "
        "provisioned GPUs, as Dynamo's planner evaluation divides goodput by its time-averaged "
        "`avg_gpu`; BLIS counts goodput as requests meeting every SLO target, per second). "
        "TTFT: arrival to first token; TPOT: (end-to-end - TTFT) / (output tokens - 1), "
        "requests with at least 2 output tokens (vLLM's benchmark definition); percentiles "
        "over a run's completed scored requests, then the mean over seeds.",
        "",
    ]
    if cmp:
        lines += [
            f"{heading}# Against kube-default + request-rate (paired by seed)",
            "",
            "Mean per-seed difference (pair minus baseline) [95 % CI] and the verdict: "
            f"{VERDICT_LEGEND}. pp: percentage points.",
            "",
            comparison_table(cmp),
            "",
        ]
    if each:
        lines += [
            f"{heading}# kvspread + slo against each baseline (paired by seed)",
            "",
            "kvspread + slo minus the baseline named in the row, same arrivals per seed; the "
            "other placement policies under the same autoscaler are the fair placement "
            "baselines, kube-default + request-rate the cluster without kvspread.",
            "",
            comparison_table(each, against=True),
            "",
        ]
    n_seeds = len(seeds)
    bars = (
        f"bars: 95 % confidence interval of the mean over the {n_seeds} seeds (Student t, "
        "each pair on its own; the paired differences above are usually tighter)"
        if n_seeds > 1
        else "one seed: no bars"
    )
    lines += [
        f"![SLO attainment against GPU-hours]({prefix}cost.png)",
        "",
        f"Realtime SLO met against GPU-hours in use, one point per pair, mean over seeds; {bars}.",
        "",
        f"![latency over time against the HPA target and the scored SLO]({prefix}latency.png)",
        "",
        "Per service, first seed of each placement under one autoscaler. Left: p95 end-to-end "
        "latency over 60 s (the adapter's SLI); dashed: the service's HPA p95 target (what the "
        "`slo` autoscaler scales on; not the scored SLO). Right: p95 of end-to-end latency per "
        "output token of the requests that finished in each 60 s; dashed: the scored SLO "
        f"budget of the service's class ({budgets}).",
        "",
        f"![replicas over time]({prefix}replicas.png)",
        "",
        f"Command: `{command}`; {n_req:,.0f} scored requests simulated in {wall_s:.0f} s of "
        f"wall time for this section. Files: `{prefix}summary.csv`, `{prefix}runs.csv`, "
        f"`{prefix}comparison.csv`"
        + (f", `{prefix}kvspread_comparison.csv`" if each else "")
        + f", `{prefix}timeline.csv`.",
        "",
    ]
    return "\n".join(lines)


def seed_span(seeds: Sequence[int]) -> str:
    """1,2,3,4 -> '1..4'; anything else as a comma list (what --seeds accepts)."""
    if len(seeds) > 2 and list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}..{seeds[-1]}"
    return ",".join(map(str, seeds))
