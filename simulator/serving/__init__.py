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


def quick(out_dir: Path, jobs: int = 1, progress: bool = True) -> tuple[str, list[str]]:
    """A representative short run that fits the combined quick report's time budget: the
    bundled real workloads on the small cluster, every placement policy x autoscaler,
    three seeds, half an hour simulated. Writes serving_* files into `out_dir`; returns
    the Markdown section and its headline sentences."""
    from simulator.serving import report
    from simulator.serving.autoscalers import AUTOSCALERS
    from simulator.serving.presets import real_workload_mapping

    cfg = config_from_mapping({**real_workload_mapping(), "duration_s": QUICK_DURATION_S})
    exp = run_experiment(
        cfg,
        POLICIES,
        QUICK_SEEDS,
        jobs=jobs,
        progress=sys.stderr if progress else None,
        autoscalers=AUTOSCALERS,
    )
    seeds = f"{QUICK_SEEDS[0]}..{QUICK_SEEDS[-1]}"
    command = f"kvspread simulate serving --duration {QUICK_DURATION_S:g} --seeds {seeds}"
    md = write_outputs(exp, Path(out_dir), command)
    return md, report.headline(exp.summary, report.compare_rows(exp.rows))
