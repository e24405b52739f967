"""bench/routing_cache_eval.py on a real (short) serving simulation of the Mooncake trace."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "bench/routing_cache_eval.py"


def test_it_pairs_kvspread_against_each_policy_and_checks_the_goals(tmp_path: Path) -> None:
    out = tmp_path / "mc"
    sim = [sys.executable, "-m", "simulator.serving", "--workload", "mc=mooncake-conv",
           "--cluster", "whole-gpu", "--config", str(ROOT / "bench/routing_cache_mooncake.yaml"),
           "--autoscalers", "none", "--policies", "kube-default",
           "--routing", "round-robin,least-request,llm-d,kvspread", "--seeds", "1..2",
           "--duration", "60", "--rate-scale", "0.5", "--jobs", "1", "--no-progress",
           "--out", str(out)]  # fmt: skip
    subprocess.run(sim, cwd=ROOT, check=True, capture_output=True)
    run = subprocess.run([sys.executable, str(BENCH), str(out)], cwd=ROOT,
                         capture_output=True, text=True, check=True)  # fmt: skip
    text = run.stdout
    assert "### mc (2 seeds)" in text
    for policy in ("round-robin", "least-request", "llm-d"):
        assert f"| {policy} | " in text
    paired_rows = [
        line for line in text.splitlines() if line.startswith("| llm-d | ") and "[" in line
    ]
    assert len(paired_rows) == 1  # kvspread - llm-d, with 95 % intervals
    goals = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(goals) == 4 and all(" met (" in g or "NOT met" in g for g in goals)


def test_a_folder_without_runs_is_a_one_line_error(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, str(BENCH), str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode != 0
    assert run.stderr.strip().startswith("error:") and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
