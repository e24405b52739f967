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

QUICK_DURATION_S = 1800.0
QUICK_SEED = 1


def quick(out_dir: Path, jobs: int = 1) -> str:
    """A representative short run (every policy, one seed, half an hour simulated) that
    fits the combined quick report's time budget; writes serving_* files into `out_dir`
    and returns the Markdown section."""
    cfg = config_from_mapping({"duration_s": QUICK_DURATION_S})
    exp = run_experiment(cfg, POLICIES, [QUICK_SEED], jobs=jobs, progress=sys.stderr)
    command = f"kvspread simulate serving --duration {QUICK_DURATION_S:g} --seeds {QUICK_SEED}"
    return write_outputs(exp, Path(out_dir), command)
