"""The serving report's opening, its what-users-compare columns and its plots (issue 23,
points 5 and 6). The opening's wording is tested on small synthetic per-seed rows, so the
numbers it must say are known exactly; the columns and plots on a short real run."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simulator.serving import config_from_mapping, report, run_experiment
from simulator.serving.experiment import write_outputs
from simulator.serving.routing_report import ROUTING_METRICS
from simulator.serving.stats import COMPARABLE, in_words, paired, seeds_needed, t_quantile_975

METRICS = {
    "slo_realtime": 0.95,
    "slo_batch": 0.99,
    "slo_goodput_per_gpu_hour": 3000.0,
    "mean_e2e_s": 3.0,
    "p50_ttft_s": 0.2,
    "p90_ttft_s": 0.5,
    "p99_ttft_s": 0.9,
    "mean_tpot_s": 0.02,
    "p90_tpot_s": 0.03,
    "p99_tpot_s": 0.05,
    "p99_e2e_s": 9.0,
    "gpu_hours_occupied": 1.5,
    "oom_rate": 0.0,
    "failed_starts": 0.0,
    "requests": 1000,
}


def _rows(pairs: dict[tuple[str, str], dict[str, list[float]]]) -> list[dict[str, Any]]:
    """Per-seed rows (seeds 1..3): METRICS, with the per-seed series given per pair."""
    out = []
    for (policy, autoscaler), series in pairs.items():
        for k, seed in enumerate((1, 2, 3)):
            row: dict[str, Any] = {
                "policy": policy,
                "autoscaler": autoscaler,
                "routing": "least-request",
                "seed": seed,
                **METRICS,
            }
            row.update({m: v[k] for m, v in series.items()})
            out.append(row)
    return out


def _opening(rows: list[dict[str, Any]]) -> list[str]:
    return report.headline(
        report.aggregate(rows), report.compare_rows(rows), report.compare_goal(rows)
    )


def test_a_large_difference_three_seeds_cannot_tell_is_not_called_no_difference() -> None:
    # GPU-h diffs +0.6, +1.2, +0.6: mean +0.8 (+53 %), sd 0.346, 95 % CI -0.06 to +1.66
    rows = _rows(
        {
            ("kube-default", "request-rate"): {"gpu_hours_occupied": [1.4, 1.5, 1.6]},
            ("kvspread", "slo"): {"gpu_hours_occupied": [2.0, 2.7, 2.2]},
        }
    )
    head = _opening(rows)
    gpu = next(c for c in head[0].split("; ") if c.startswith("GPU-hours in use"))
    assert gpu.startswith("GPU-hours in use 2.30 against 1.50 GPU-h (+0.80 h (+53 %), 95 % CI")
    # four seeds of this spread would exclude 0: t(0.975, 3) x 0.346 / 2 = 0.55 < 0.8
    assert gpu.endswith("-0.06 to +1.66: 3 seeds cannot tell (~4 would))")
    assert "no significant difference" not in gpu
    # an equal metric is still "no significant difference", with the size that would matter
    assert "realtime SLO met 95.0 % against 95.0 % (+0.00 pp" in head[0]
    assert "no significant difference (under the 1 pp that matters)" in head[0]
    assert head[-1].startswith("How sure: 3 seeds") and "too small to decide" in head[-1]
    cmp = report.compare_rows(rows)
    (c,) = [x for x in cmp if x["metric"] == "gpu_hours_occupied"]
    assert c["verdict"] == "inconclusive" and c["seeds_needed"] == 4
    assert c["rel_diff"] == pytest.approx(0.8 / 1.5)
    # the table cell says the same
    assert report.comparison_table(cmp).count("unresolved (~4 seeds)") == 1


def test_seeds_needed_is_the_first_n_whose_interval_excludes_zero() -> None:
    for mean, sd in ((0.8, 0.346), (0.1, 0.5), (2.0, 1.0)):
        n = seeds_needed(mean, sd, 4)
        assert n is not None
        assert t_quantile_975(n - 1) * sd / math.sqrt(n) < mean
        if n > 4:
            assert t_quantile_975(n - 2) * sd / math.sqrt(n - 1) >= mean
    assert seeds_needed(1e-6, 1.0, 4) is None  # more than 1000
    assert seeds_needed(0.0, 1.0, 4) is None


def test_where_it_loses_names_kvspreads_own_losses_against_each_baseline() -> None:
    slo = {"slo_realtime": [0.90, 0.91, 0.92]}
    rows = _rows(
        {
            ("kube-default", "request-rate"): slo,
            ("kube-default", "slo"): slo,
            ("round-robin", "slo"): {"slo_realtime": [0.95, 0.96, 0.97]},
            # the best pair of the run: not kvspread's loss, so not named
            ("memory-weighted", "none"): {"slo_realtime": [0.99, 0.99, 0.99]},
            # worse p99 TPOT too: a CSV-only metric, so "where it loses" leaves it out
            ("kvspread", "slo"): {
                **slo,
                "gpu_hours_occupied": [1.4, 2.2, 1.6],
                "p99_tpot_s": [0.06, 0.061, 0.062],
            },
        }
    )
    head = _opening(rows)
    (loses,) = [s for s in head if s.startswith("Where kvspread + slo loses")]
    assert "against round-robin + slo, worse on realtime SLO -5.00 pp [-5.00, -5.00]" in loses
    # +0.23 h (+16 %) with the interval containing 0: said as possibly worse, not hidden
    assert "against kube-default + request-rate, possibly worse, unresolved, on GPU-h in use" in (
        loses
    )
    assert "seeds would tell" in loses
    assert "memory-weighted" not in loses and "best" not in " ".join(head)
    assert "TPOT" not in loses
    each = report.compare_goal(rows)
    assert any(c["metric"] == "p99_tpot_s" and c["verdict"] == "worse" for c in each)
    baselines = [b for b in report.goal_baselines(rows)]
    assert baselines == [("kube-default", "request-rate"), ("kube-default", "slo"),
                         ("round-robin", "slo")]  # fmt: skip


def test_in_words_for_each_verdict() -> None:
    spec = COMPARABLE["mean_e2e_s"]
    worse = paired("mean_e2e_s", [5.0, 5.2, 5.1], [4.0, 4.1, 4.0]).row()
    assert in_words(worse, spec).endswith(": worse")
    one = paired("mean_e2e_s", [5.0], [4.0]).row()
    assert in_words(one, spec) == "+1.00 s (+25 %), one seed: no interval"
    small = paired("mean_e2e_s", [4.01, 3.99, 4.02], [4.0, 4.0, 4.0]).row()
    assert "no significant difference (under the 5 % of the baseline that matters)" in (
        in_words(small, spec)
    )
    # a small mean whose interval reaches a material size is not called settled: the bare
    # `kvspread simulate` said "+0.33 pp, 95 % CI -8.40 to +9.06: no significant difference
    # (under the 1 pp that matters)"
    wide = paired("slo_realtime", [0.95, 0.90, 1.00], [0.95, 0.95, 0.95]).row()
    assert wide["verdict"] == "no significant difference"
    words = in_words(wide, COMPARABLE["slo_realtime"])
    assert words.endswith(
        "no significant difference, but the interval reaches past the 1 pp that matters,"
        " so 3 seeds cannot rule one out"
    ), words


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, str]:
    cfg = config_from_mapping({"duration_s": 150.0, "warmup_s": 30.0})
    exp = run_experiment(
        cfg,
        ["kube-default", "kvspread"],
        [1, 2],
        progress=None,
        autoscalers=["request-rate", "slo"],
    )
    out = tmp_path_factory.mktemp("report")
    md = write_outputs(exp, out, "kvspread simulate serving --seeds 1,2")
    return exp, out, md


def test_report_opening_and_outputs(small_run: tuple[Any, Path, str]) -> None:
    exp, out, md = small_run
    head = report.headline(
        exp.summary, report.compare_rows(exp.rows), report.compare_goal(exp.rows)
    )
    assert 3 <= len(head) <= 5
    assert head[0].startswith("kvspread placement with SLO autoscaling (kvspread + slo) against")
    assert any(s.startswith("Where kvspread + slo loses: against kube-default") for s in head)
    assert any(s.startswith("How sure: 2 seeds") for s in head)
    assert md.startswith("## Serving simulation\n\n" + report.opening_text(head))
    assert "values are means over the 2 seeds" in md
    summary = (out / "serving_summary.csv").read_text().splitlines()
    assert summary[0].startswith("policy,autoscaler,routing,seeds,")
    assert len(summary) == 5
    cmp = (out / "serving_comparison.csv").read_text()
    assert cmp.startswith("policy,autoscaler,metric,seeds,mean_diff,ci_low,ci_high,verdict")
    for name in ("cost", "latency", "replicas"):
        assert (out / f"serving_{name}.png").stat().st_size > 1000


NEW_RUN_COLUMNS = [
    "p50_ttft_s",
    "p90_ttft_s",
    "p99_ttft_s",
    "mean_tpot_s",
    "p90_tpot_s",
    "p99_tpot_s",
    "slo_good_requests",
    "gpu_hours_scored",
    "slo_goodput_per_gpu_hour",
    "slo_goodput_rps",
]


def test_users_columns_in_the_csvs_and_the_report(small_run: tuple[Any, Path, str]) -> None:
    exp, out, md = small_run
    for name in ("serving_runs.csv", "serving_summary.csv"):
        with (out / name).open() as f:
            header = next(csv.reader(f))
        assert set(NEW_RUN_COLUMNS) <= set(header), name
    with (out / "serving_comparison.csv").open() as f:
        cmp = list(csv.DictReader(f))
    assert list(cmp[0])[-3:] == ["baseline_mean", "rel_diff", "seeds_needed"]
    users = {"slo_goodput_per_gpu_hour", *NEW_RUN_COLUMNS[:6]}  # goodput, TTFT, TPOT
    assert users <= {c["metric"] for c in cmp}
    # the catalogue says which way is good for each
    assert COMPARABLE["slo_goodput_per_gpu_hour"].higher_is_better
    assert not any(COMPARABLE[m].higher_is_better for m in NEW_RUN_COLUMNS[:6])
    assert users - {"p50_ttft_s"} <= set(ROUTING_METRICS) and "p50_ttft_s" in ROUTING_METRICS
    with (out / "serving_kvspread_comparison.csv").open() as f:
        each = list(csv.DictReader(f))
    assert users <= {c["metric"] for c in each}
    assert {(c["baseline_policy"], c["baseline_autoscaler"]) for c in each} == {
        ("kube-default", "request-rate"),
        ("kube-default", "slo"),
    }
    assert "### What users compare: SLO goodput per GPU-hour, TTFT, TPOT" in md
    assert "| SLO goodput (req / GPU-h) |" in md and "| mean TPOT (ms) |" in md
    assert "### kvspread + slo against each baseline (paired by seed)" in md


def test_ttft_tpot_and_goodput_follow_their_definitions(small_run: tuple[Any, Path, str]) -> None:
    exp, _, _ = small_run
    res, row = exp.results[0], exp.rows[0]
    cfg = res.config
    scored = [r for r in res.requests if r.arrival >= cfg.warmup_s]
    ok = [r for r in scored if r.status == "ok"]
    ttft = [r.first_token - r.arrival for r in ok]
    tpot = [(r.finish - r.first_token) / (r.out - 1) for r in ok if r.out > 1]
    assert row["p90_ttft_s"] == pytest.approx(float(np.percentile(ttft, 90)))
    assert row["mean_tpot_s"] == pytest.approx(float(np.mean(tpot)))
    assert row["p99_tpot_s"] == pytest.approx(float(np.percentile(tpot, 99)))
    qos = {n: s.qos for n, s in cfg.services.items()}
    budget = {"realtime": cfg.slo.realtime_s, "batch": cfg.slo.batch_s}
    good = sum(
        1
        for r in ok
        if qos[r.service] in budget
        and (r.finish - r.arrival) / max(1, r.out) <= budget[qos[r.service]]
    )
    assert row["slo_good_requests"] == good > 0
    # GPU-hours of the scored window (warm-up, warm-up + duration] only: the GPUs in use at
    # each timeline step of it, fewer than over the whole run (warm-up and drain included)
    end = cfg.warmup_s + cfg.duration_s
    in_use = [t.gpus_occupied for t in res.timeline if cfg.warmup_s < t.t <= end]
    assert len(in_use) == round(cfg.duration_s / cfg.timeline_step_s)
    gpu_h = sum(in_use) * cfg.timeline_step_s / 3600.0
    assert row["gpu_hours_scored"] == pytest.approx(gpu_h)
    assert 0 < row["gpu_hours_scored"] < res.occupied_gpu_seconds / 3600.0
    assert row["slo_goodput_per_gpu_hour"] == pytest.approx(good / gpu_h)
    assert row["slo_goodput_rps"] == pytest.approx(good / cfg.duration_s)


def test_cost_plot_bars_are_the_95_percent_intervals_it_says(
    small_run: tuple[Any, Path, str],
) -> None:
    exp, _, md = small_run
    fig = report.cost_figure(exp.summary, exp.rows)
    ax = fig.axes[0]
    assert "bars: 95 % CI of the mean over 2 seeds (Student t" in ax.get_title()
    assert "95 % confidence interval of the mean over the 2 seeds" in md
    # each pair's x bar spans mean +/- t(0.975, 1) x sd / sqrt(2) of its GPU-hours
    spread = 0
    for k, a in enumerate(exp.summary):
        xs = [
            r["gpu_hours_occupied"]
            for r in exp.rows
            if (r["policy"], r["autoscaler"]) == (a["policy"], a["autoscaler"])
        ]
        half = t_quantile_975(1) * float(np.std(xs, ddof=1)) / math.sqrt(2)
        segment = ax.containers[k].lines[2][0].get_segments()[0]
        assert segment[1][0] - segment[0][0] == pytest.approx(2 * half)
        if half > 0:
            spread += 1
            assert half > float(np.std(xs))  # wider than the unlabelled +/- 1 SD it replaces
    assert spread  # at least one pair's GPU-hours differ between the seeds


def test_latency_plot_draws_the_hpa_target_and_the_scored_budget(
    small_run: tuple[Any, Path, str],
) -> None:
    exp, _, md = small_run
    fig = report.latency_figure(exp.results)
    cfg = exp.results[0].config
    services = list(cfg.services)
    assert len(fig.axes) == 2 * len(services)
    for i, s in enumerate(services):
        left, right = fig.axes[2 * i], fig.axes[2 * i + 1]
        labels = {t.get_text() for t in right.get_legend().get_texts()}
        qos = cfg.services[s].qos
        budget = {"realtime": cfg.slo.realtime_s, "batch": cfg.slo.batch_s}.get(qos)
        if budget is not None:
            assert f"scored SLO {1000 * budget:g} ms / token" in labels
            dashed = [ln for ln in right.get_lines() if ln.get_linestyle() == "--"]
            assert [ln.get_ydata()[0] for ln in dashed] == [pytest.approx(1000 * budget)]
        targets = [m.value for m in cfg.services[s].metrics if "latency_p95" in m.metric]
        left_labels = {t.get_text() for t in left.get_legend().get_texts()}
        assert {f"HPA p95 target {v:g} s" for v in targets} <= left_labels
        assert not any("SLO" in t for t in left_labels)  # the HPA target is not the SLO
    assert "dashed: the service's HPA p95 target" in md
    assert "dashed: the scored SLO budget" in md
