"""The routing comparison of a serving run: every routing policy against round-robin (a
Kubernetes Service), paired by seed under the same placement policy and autoscaler, and
beside the design notes' routing table.

Why paired: every (placement, autoscaler, routing) combination of a seed replays the same
arrivals, so the per-seed differences carry the routing effect without the traffic's
seed-to-seed spread (simulator/serving/stats.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final

from router.config import MetricsConfig
from simulator.serving.routing import BASELINE_ROUTING
from simulator.serving.stats import COMPARABLE, VERDICT_LEGEND, cell, compared, paired

__all__ = ["compare_routing", "section", "DESIGN_NOTES", "ROUTING_COMPARED", "ROUTING_METRICS"]

ROUTING_COMPARED: Final = (
    COMPARABLE["mean_e2e_s"].in_ms(),
    *compared(
        "p99_e2e_s",
        "p90_ttft_s",
        "p99_ttft_s",
        "mean_tpot_s",
        "slo_goodput_per_gpu_hour",
        "oom_rate",
        "slo_realtime",
        "slo_batch",
        "preemptions",
        "gpu_hours_occupied",
    ),
)
"""The columns of the routing comparison (mean e2e in ms: routing moves it by ms)."""
ROUTING_METRICS: Final = tuple(c.metric for c in ROUTING_COMPARED) + (
    "p50_ttft_s",
    "p90_tpot_s",
    "p99_tpot_s",
)
"""What `serving_routing_comparison.csv` compares: the table's columns, then the other TTFT
and TPOT percentiles."""

DESIGN_NOTES: tuple[tuple[str, float, float], ...] = (
    ("round-robin", 1842.0, 7.2),
    ("memory-weighted", 1426.0, 2.1),
    ("multimodal dynamic weight", 987.0, 0.3),
)
"""The design notes' routing table: (scheme, mean end-to-end ms, OOM %)."""


def _key(r: dict[str, Any]) -> tuple[str, str]:
    return str(r["policy"]), str(r.get("autoscaler", ""))


def _baseline(routings: Sequence[str]) -> str:
    return BASELINE_ROUTING if BASELINE_ROUTING in routings else routings[0]


def compare_routing(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (placement, autoscaler): each routing minus round-robin (or the run's first
    routing when round-robin did not run), per seed, on ROUTING_METRICS. Empty when the
    run has one routing policy."""
    routings = list(dict.fromkeys(str(r.get("routing", "")) for r in rows))
    if len(routings) < 2:
        return []
    base = _baseline(routings)
    by: dict[tuple[str, str], dict[str, dict[int, dict[str, Any]]]] = {}
    for r in rows:
        by.setdefault(_key(r), {}).setdefault(str(r["routing"]), {})[int(r["seed"])] = r
    out: list[dict[str, Any]] = []
    for (policy, autoscaler), per in by.items():
        ref = per.get(base, {})
        for routing, runs in per.items():
            if routing == base:
                continue
            seeds = sorted(set(runs) & set(ref))
            for metric in ROUTING_METRICS:
                p = paired(
                    metric,
                    [float(runs[s][metric]) for s in seeds],
                    [float(ref[s][metric]) for s in seeds],
                )
                head = {"policy": policy, "autoscaler": autoscaler, "routing": routing}
                out.append({**head, "baseline": base, **p.row()})
    return out


def _fmt(v: Any, fmt: str) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def _routings_of(summary: Sequence[dict[str, Any]], pair: tuple[str, str]) -> list[dict[str, Any]]:
    return [a for a in summary if _key(a) == pair]


def _design_notes_text(rows: list[dict[str, Any]], cmp: Sequence[dict[str, Any]]) -> list[str]:
    """Our figures beside the design notes' table, and what does and does not compare."""
    base = next((a for a in rows if a.get("routing") == cmp[0]["baseline"]), None)
    if base is None:
        return []
    b_ms = 1000.0 * float(base["mean_e2e_s"])
    lines = [
        "| source | routing | mean e2e (ms) | change vs round-robin | OOM / request |",
        "|---|---|---:|---:|---:|",
    ]
    rr = DESIGN_NOTES[0][1]
    for name, ms, oom in DESIGN_NOTES:
        lines.append(
            f"| design notes | {name} | {ms:.0f} | {100 * (ms - rr) / rr:+.1f} % | {oom:.1f} % |"
        )
    for a in rows:
        ms = 1000.0 * float(a["mean_e2e_s"])
        lines.append(
            f"| this run | {a['routing']} | {ms:.0f} | {100 * (ms - b_ms) / b_ms:+.1f} % | "
            f"{_fmt(100 * float(a['oom_rate']), '{:.3f}')} % |"
        )
    ks = next((c for c in cmp if c["routing"] == "kvspread" and c["metric"] == "mean_e2e_s"), None)
    oom_max = max(100 * float(a["oom_rate"]) for a in rows)
    text = [
        "The design notes give no cluster, model or traffic for their table, so only the "
        "direction and the relative size compare, not the milliseconds.",
    ]
    if ks is not None and not math.isnan(ks["mean_diff"]):
        rel = 100 * ks["mean_diff"] * 1000.0 / b_ms
        if ks["verdict"] == "better":
            how = f"is faster than round-robin by {-rel:.1f} %, a significant difference"
        elif ks["verdict"] == "worse":
            how = f"is slower than round-robin by {rel:.1f} %, a significant difference"
        elif ks["verdict"] == "inconclusive":
            how = f"differs from round-robin by {rel:+.1f} %, which this run is too small to tell"
        else:
            how = f"differs from round-robin by {rel:+.1f} %, not a significant difference"
        text.append(
            f"Here kvspread routing {how} ({cell(ks, 1000.0, 'ms')}); the design notes "
            f"report {100 * (DESIGN_NOTES[2][1] - rr) / rr:+.1f} % for their dynamic weight."
        )
    text.append(
        f"OOM: at most {oom_max:.3f} % of requests under any routing here, against the "
        "design notes' 7.2 % for round-robin: the simulated engines are paged (vLLM), so a "
        "full KV cache preempts and recomputes rather than failing the request; only a "
        "request longer than `max_model_len` or than the whole KV pool of the replica it "
        "reaches fails."
    )
    return ["", *lines, "", " ".join(text)]


def comparison_table(cmp: Sequence[dict[str, Any]]) -> str:
    """The paired-differences table of `serving_routing_comparison.csv`'s rows, one line per
    (placement, autoscaler, routing), as the report and docs/evaluation.md show it."""
    pairs = list(dict.fromkeys((c["policy"], c["autoscaler"]) for c in cmp))
    by = {(c["policy"], c["autoscaler"], c["routing"], c["metric"]): c for c in cmp}
    head = "| placement | autoscaler | routing | " + " | ".join(c.label for c in ROUTING_COMPARED)
    lines = [head + " |", "|---|---|---|" + "---:|" * len(ROUTING_COMPARED)]
    for p, a in pairs:
        routings = list(
            dict.fromkeys(c["routing"] for c in cmp if (c["policy"], c["autoscaler"]) == (p, a))
        )
        for r in routings:
            cells = [cell(by.get((p, a, r, c.metric)), c.factor, c.unit) for c in ROUTING_COMPARED]
            lines.append(f"| {p} | {a} | {r} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def section(
    summary: Sequence[dict[str, Any]],
    cmp: Sequence[dict[str, Any]],
    heading: str = "###",
    prefix: str = "serving_",
) -> str:
    """The report's routing section: values per routing, paired differences, design notes."""
    if not cmp:
        return ""
    base = cmp[0]["baseline"]
    pairs = list(dict.fromkeys((c["policy"], c["autoscaler"]) for c in cmp))
    seeds = max(int(c["seeds"]) for c in cmp)
    every = MetricsConfig().interval_s
    lines = [
        f"{heading} Request routing (paired by seed, against {base})",
        "",
        f"Each routing policy against {base} under the same placement policy and autoscaler, "
        f"on the same arrivals per seed ({seeds} seeds): mean per-seed difference [95 % CI] "
        f"and the verdict ({VERDICT_LEGEND}). "
        f"`kv-queue` and `kvspread` read replica metrics scraped every {every:g} s (the "
        f"router's default), so they see queues and KV usage up to {every:g} s old; "
        "`least-request` counts in-flight requests itself (exact); `round-robin` reads "
        "nothing.",
        "",
    ]
    lines += comparison_table(cmp).splitlines()
    for p, a in pairs:
        rows = _routings_of(summary, (p, a))
        lines += ["", f"Beside the design notes' routing table ({p} placement, {a} autoscaler):"]
        lines += _design_notes_text(
            rows, [c for c in cmp if (c["policy"], c["autoscaler"]) == (p, a)]
        )
    lines += ["", f"File: `{prefix}routing_comparison.csv`.", ""]
    return "\n".join(lines)
