"""Multimodal serving simulation (issue 5, part 2): see docs/serving-simulation.md.

    from simulator.serving import quick, run_experiment, default_config
    md = quick(Path("report"), jobs=2)     # short representative run -> Markdown section

`kvspread simulate serving` is `simulator.serving.cli` (`add_arguments`, `run`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from simulator.serving.config import SimConfig, config_from_mapping, default_config
from simulator.serving.experiment import Experiment, run_experiment, write_outputs
from simulator.serving.placement import POLICIES
from simulator.serving.sim import RunResult, simulate

__all__ = [
    "quick",
    "QUICK_DURATION_S",
    "SimConfig",
    "default_config",
    "config_from_mapping",
    "run_experiment",
    "write_outputs",
    "Experiment",
    "simulate",
    "RunResult",
    "POLICIES",
]

QUICK_DURATION_S = 1200.0
QUICK_SEEDS = (1, 2, 3)
QUICK_AUTOSCALERS = ("none", "request-rate", "queue-depth", "slo")
"""The quick run leaves `fixed-peak` out to stay in the combined report's time budget."""


def quick(
    out_dir: Path, jobs: int = 1, progress: bool = True, link_dir: str = ""
) -> tuple[str, list[str]]:
    """A representative short run that fits the combined quick report's time budget: the
    bundled real workloads on the small cluster, every placement policy x autoscaler,
    three seeds, twenty minutes simulated. Writes serving_* files into `out_dir`; returns
    the Markdown section and its opening sentences. With `link_dir` (the combined report
    one folder up, e.g. "serving/"), the returned section names its files under that folder
    and leaves the opening out, for the caller to put at the top."""
    from simulator.serving import report, slo_goal
    from simulator.serving.presets import real_workload_mapping

    cfg = config_from_mapping({**real_workload_mapping(), "duration_s": QUICK_DURATION_S})
    exp = run_experiment(
        cfg,
        POLICIES,
        QUICK_SEEDS,
        jobs=jobs,
        progress=sys.stderr if progress else None,
        autoscalers=QUICK_AUTOSCALERS,
    )
    seeds = f"{QUICK_SEEDS[0]}..{QUICK_SEEDS[-1]}"
    command = f"kvspread simulate serving --duration {QUICK_DURATION_S:g} --seeds {seeds}"
    md = write_outputs(exp, Path(out_dir), command)
    cmp, each = report.compare_rows(exp.rows), report.compare_goal(exp.rows)
    if link_dir:
        md = report.markdown_section(
            exp.summary,
            exp.results,
            command,
            exp.wall_s,
            f"{link_dir}serving_",
            exp.rows,
            cmp,
            "##",
            each,
            opening=False,
        )
    return md, report.headline(exp.summary, cmp, each) + slo_goal.opening(exp.rows)
