"""docs/evaluation.md's tables from a run folder's CSVs: the same as the report prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.serving import evaltables
from simulator.serving.report import comparison_table, markdown_table, users_table, write_csv

SUMMARY = [
    {
        "policy": p,
        "autoscaler": "request-rate",
        "routing": "least-request",
        "seeds": 10,
        "mean_e2e_s": e2e,
        "p99_e2e_s": 9.5,
        "slo_realtime": 0.9625,
        "slo_batch": 1.0,
        "slo_goodput_per_gpu_hour": 3151.23,
        "p90_ttft_s": 0.2605,
        "mean_tpot_s": 0.0161,
        "gpu_hours_occupied": 2.72,
        "prefix_hit_rate": float("nan"),
    }
    for p, e2e in (("kube-default", 3.18189), ("kvspread", 3.03))
]
COMPARISON = [
    {
        "policy": "kvspread",
        "autoscaler": "request-rate",
        "metric": m,
        "seeds": 10,
        "mean_diff": d,
        "ci_low": d - 0.01,
        "ci_high": d + 0.01,
        "verdict": v,
        "baseline_mean": 1.0,
        "rel_diff": d,
        "seeds_needed": n,
    }
    for m, d, v, n in (
        ("slo_realtime", 0.008, "better", ""),
        ("mean_e2e_s", -0.15, "inconclusive", 22),
    )
]


def test_tables_are_the_reports_own(tmp_path: Path) -> None:
    write_csv(tmp_path / evaltables.SUMMARY, SUMMARY)
    write_csv(tmp_path / evaltables.COMPARISON, COMPARISON)
    out = evaltables.tables(tmp_path)
    assert markdown_table(SUMMARY) in out
    assert users_table(SUMMARY) in out
    assert comparison_table(COMPARISON) in out
    assert "unresolved (~22 seeds)" in out  # an int stays an int through the CSV
    assert "against each baseline" not in out  # no kvspread + slo file


def test_a_missing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert evaltables.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("evaltables: ") and "serving_summary.csv" in err
    assert err.count("\n") == 1


def test_a_foreign_csv_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / evaltables.SUMMARY).write_text("a,b\n1,2\n")
    assert evaltables.main([str(tmp_path)]) == 2
    assert "no column policy, autoscaler" in capsys.readouterr().err


def test_rows_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evaltables, "MAX_ROWS", 1)
    write_csv(tmp_path / evaltables.SUMMARY, SUMMARY)
    with pytest.raises(evaltables.TablesError, match="more than 1 rows"):
        evaltables.tables(tmp_path)


def test_a_routing_run_gets_the_routing_table_not_an_empty_baseline_one(tmp_path: Path) -> None:
    """A run with several routings and without the kube-default + request-rate baseline (the
    evaluation's routing run): the baseline table, all "no data", is left out, and the
    routing comparison is the report's own table."""
    from simulator.serving import routing_report

    no_data = [{**c, "verdict": "no data", "mean_diff": float("nan")} for c in COMPARISON]
    routed = [
        {
            "policy": "kvspread",
            "autoscaler": "slo",
            "routing": "kvspread",
            "baseline": "round-robin",
            "metric": "mean_e2e_s",
            "seeds": 10,
            "mean_diff": -0.695,
            "ci_low": -1.17,
            "ci_high": -0.221,
            "verdict": "better",
            "baseline_mean": 5.72,
            "rel_diff": -0.12,
            "seeds_needed": "",
        }
    ]
    write_csv(tmp_path / evaltables.SUMMARY, SUMMARY)
    write_csv(tmp_path / evaltables.COMPARISON, no_data)
    write_csv(tmp_path / evaltables.ROUTING, routed)
    out = evaltables.tables(tmp_path)
    assert "against kube-default + request-rate" not in out
    assert "Each routing against round-robin" in out
    assert routing_report.comparison_table(routed) in out
    assert "-695 ms [-1170, -221] better" in out
