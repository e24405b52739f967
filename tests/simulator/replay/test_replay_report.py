"""The placement report's verdict and paired comparison (on synthetic replay results whose
unallocated GPU % is known), and that the three `kvspread simulate` commands never
overwrite each other's outputs in one --out folder (issue 23, point 6)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from kvspread.cli import main
from simulator.replay.placement import ReplayResult
from simulator.replay.report import (
    compare_placements,
    markdown_report,
    placement_verdict,
    write_report,
)

TOTAL_GPUS = 100


def fake(policy: str, seed: int, unalloc_100: float, unalloc_130: float) -> ReplayResult:
    """A replay that reaches 100 % and 130 % arrived demand with these unallocated GPU %."""
    arrived = np.array([100, 130]) * TOTAL_GPUS * 10
    used = (100.0 - np.array([unalloc_100, unalloc_130])) * TOTAL_GPUS * 10
    return ReplayResult(
        trace="default",
        policy=policy,
        seed=seed,
        total_gpus=TOTAL_GPUS,
        arrived_milli=arrived.astype(np.int64),
        used_milli=used.astype(np.int64),
        frag_milli=np.zeros(2),
        idle_milli=(TOTAL_GPUS * 1000 - used).astype(np.int64),
        failed=0,
        elapsed_s=1.0,
    )


def runs() -> list[ReplayResult]:
    values = {
        "bestfit": [7.0, 7.2, 7.1],
        "fgd": [4.70, 4.70, 4.70],
        "kvspread": [4.42, 4.63, 4.59],  # -0.15 pp on FGD, 3 seeds cannot tell
        "kvspread-k8s": [5.9, 6.0, 6.4],  # worse than FGD
    }
    return [
        fake(p, seed, v[k], v[k] - 0.1)
        for p, v in values.items()
        for k, seed in enumerate((42, 43, 44))
    ]


def test_placement_part_has_a_verdict_with_spread_and_paired_intervals() -> None:
    results = runs()
    cmp = compare_placements(results)
    # kvspread policies against every baseline, never against each other
    assert {(c["policy"], c["baseline"]) for c in cmp} == {
        (k, b) for k in ("kvspread", "kvspread-k8s") for b in ("bestfit", "fgd")
    }
    fgd = next(
        c
        for c in cmp
        if (c["policy"], c["baseline"], c["metric"]) == ("kvspread", "fgd", "unalloc_100")
    )
    assert fgd["mean_diff"] == pytest.approx(-0.153, abs=1e-3)
    assert fgd["verdict"] == "inconclusive" and isinstance(fgd["seeds_needed"], int)
    text = placement_verdict(results, cmp)
    assert text.startswith(
        "Placement replay (Alibaba GPU trace `default`, 3 seeds, paired by seed): kvspread left "
        "4.59 % (4.42 to 4.63 over seeds) of the GPUs unallocated"
    )
    assert "FGD 4.70 % (4.70 to 4.70 over seeds): -0.15 pp, 95 % CI" in text
    assert f"3 seeds cannot tell (~{fgd['seeds_needed']} would)" in text
    # every other baseline with its paired mean and 95 % interval
    best = next(
        c
        for c in cmp
        if (c["policy"], c["baseline"], c["metric"]) == ("kvspread", "bestfit", "unalloc_100")
    )
    assert best["verdict"] == "better"
    lo, hi, mean = best["ci_low"], best["ci_high"], best["mean_diff"]
    assert f"better than BestFit {mean:+.2f} pp [{lo:+.2f}, {hi:+.2f}]" in text
    # the other kvspread policy's loss is named with its interval
    assert "kvspread + kube-scheduler defaults loses: worse than FGD (unallocated @100 %" in text
    md = markdown_report(results, [], "kvspread simulate placement", heading="##", cmp=cmp)
    assert md.index(text) < md.index("| policy | unallocated @100 % | min..max over seeds")
    assert "| kvspread | 4.59 | 4.42..4.63 |" in md
    assert "### kvspread against each baseline (paired by seed)" in md
    assert "| kvspread | FGD | -0.15 [" in md and "unresolved (~" in md


def test_placement_comparison_csv(tmp_path: Path) -> None:
    write_report(runs(), tmp_path, "kvspread simulate placement")
    with (tmp_path / "placement_comparison.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == [
        "policy",
        "baseline",
        "metric",
        "seeds",
        "mean_diff",
        "ci_low",
        "ci_high",
        "verdict",
        "baseline_mean",
        "rel_diff",
        "seeds_needed",
    ]
    assert len(rows) == 2 * 2 * 2  # 2 kvspread policies x 2 baselines x 2 metrics


def _snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in folder.rglob("*")
        if p.is_file()
    }


@pytest.fixture
def small_quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bare `kvspread simulate`, made small: 2 policies x 2 seeds to 3 % arrived, and a
    100 s serving run on 2 seeds."""
    import simulator.cli as cli
    import simulator.serving as serving

    monkeypatch.setattr(cli, "QUICK_SEEDS", (42, 43))
    monkeypatch.setattr(cli, "QUICK_POLICIES", ("fgd", "kvspread"))
    monkeypatch.setattr(cli, "QUICK_STOP_AT", 3.0)
    monkeypatch.setattr(serving, "QUICK_DURATION_S", 100.0)
    monkeypatch.setattr(serving, "QUICK_SEEDS", (1, 2))


PLACEMENT = ["simulate", "placement", "--policies", "fgd", "--seeds", "42", "--stop-at", "3"]
SERVING = ["simulate", "serving", "--policies", "kube-default", "--autoscalers", "none"]
SERVING += ["--seeds", "1", "--duration", "60", "--no-progress"]


@pytest.mark.usefixtures("small_quick")
def test_the_commands_never_overwrite_each_other(tmp_path: Path) -> None:
    quick = ["simulate", "--out", str(tmp_path), "--jobs", "1", "--no-progress"]
    assert main(quick, environ={}) == 0
    report = (tmp_path / "report.md").read_text()
    before = _snapshot(tmp_path)
    assert "placement/allocation.csv" in before and "serving/serving_runs.csv" in before
    # every file the combined report names is there
    for name in ("placement/unallocated.png", "serving/serving_cost.png"):
        assert f"]({name})" in report and name in before
    for argv in (PLACEMENT, SERVING):
        assert main([*argv, "--out", str(tmp_path), "--jobs", "1"], environ={}) == 0
    after = _snapshot(tmp_path)
    assert {k: after[k] for k in before} == before  # not one byte or timestamp changed
    assert {"placement.md", "allocation.csv", "serving_report.md"} <= set(after) - set(before)
    # and the other way round: the combined report leaves the parts' own files alone
    parts = {k: v for k, v in after.items() if "/" not in k and k != "report.md"}
    assert main(quick, environ={}) == 0
    again = _snapshot(tmp_path)
    assert {k: again[k] for k in parts} == parts
