"""`kvspread simulate serving`: flags and the command body.

The `simulate` command (simulator/cli.py) creates the subparser and calls
`add_arguments(parser)`, then `run(args)`. Flags another part already defined on the same
parser (say a shared --out or --jobs) are left alone and read by the same dest names.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvspread.preflight import check_output_dir
from kvspread.settings import ConfigError, Layered, invalid, load_yaml
from simulator.serving.config import SimConfig, config_from_mapping
from simulator.serving.experiment import (
    parse_policies,
    parse_seeds,
    run_experiment,
    write_outputs,
)
from simulator.serving.placement import POLICIES
from simulator.serving.report import markdown_table

__all__ = ["add_arguments", "run", "load_config"]

DEFAULT_SEEDS = "1,2,3"
DEFAULT_OUT = "kvspread-report"


def _add(parser: argparse.ArgumentParser, flag: str, **kw: object) -> None:
    if flag in parser._option_string_actions:  # defined by the caller: keep theirs
        return
    parser.add_argument(flag, **kw)  # type: ignore[arg-type]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the serving simulation's flags to `parser`."""
    _add(
        parser,
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="simulated seconds per run after the warm-up (default 3600)",
    )
    _add(
        parser,
        "--policies",
        default=",".join(POLICIES),
        metavar="LIST",
        help=f"comma-separated placement policies (default {','.join(POLICIES)})",
    )
    _add(
        parser,
        "--seeds",
        default=DEFAULT_SEEDS,
        metavar="LIST",
        help=f"seeds: comma list and/or ranges a..b (default {DEFAULT_SEEDS})",
    )
    _add(
        parser,
        "--out",
        default=DEFAULT_OUT,
        metavar="DIR",
        help=f"output folder (default ./{DEFAULT_OUT}); files are prefixed serving_",
    )
    _add(
        parser,
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="worker processes, one run (policy x seed) each (default 1)",
    )
    _add(
        parser,
        "--config",
        default=None,
        metavar="FILE",
        help="YAML overriding the cost model, workload, cluster, HPA "
        "(keys: docs/serving-simulation.md)",
    )
    _add(
        parser,
        "--rate",
        type=float,
        default=None,
        metavar="RPS",
        help="base request rate (overrides arrivals.rate_rps)",
    )
    _add(
        parser,
        "--no-progress",
        action="store_true",
        default=False,
        help="no progress bar on stderr",
    )


def load_config(
    path: str | None, duration: float | None = None, rate: float | None = None
) -> SimConfig:
    """Defaults < YAML file < flags; ConfigError names the bad key."""
    data = Layered(load_yaml(path), None if path is None else str(path))
    if duration is not None:
        if duration <= 0:
            raise invalid("duration_s", "a number > 0", duration).at("--duration")
        data.put("duration_s", float(duration), "--duration")
    if rate is not None:
        if rate <= 0:
            raise invalid("arrivals.rate_rps", "a number > 0", rate).at("--rate")
        if not isinstance(data.get("arrivals", {}), dict):
            raise invalid("arrivals", "a mapping", data["arrivals"]).at(str(path))
        data.put("arrivals.rate_rps", float(rate), "--rate")
    return config_from_mapping(data)


def run(args: argparse.Namespace) -> int:
    """Run every policy x seed, write the outputs into args.out, print the table."""
    try:
        seeds = parse_seeds(getattr(args, "seeds", DEFAULT_SEEDS) or DEFAULT_SEEDS)
        policies = parse_policies(getattr(args, "policies", ",".join(POLICIES)) or POLICIES)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    raw_jobs = getattr(args, "jobs", 1)
    try:
        jobs = 1 if raw_jobs is None else int(raw_jobs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"expected an integer, got {raw_jobs!r}", key="--jobs") from exc
    if jobs < 1:
        raise ConfigError(f"expected an integer >= 1, got {jobs!r}", key="--jobs")
    cfg = load_config(
        getattr(args, "config", None), getattr(args, "duration", None), getattr(args, "rate", None)
    )
    out = Path(getattr(args, "out", DEFAULT_OUT) or DEFAULT_OUT)
    check_output_dir(out, "--out")
    progress = None if getattr(args, "no_progress", False) else sys.stderr
    exp = run_experiment(cfg, policies, seeds, jobs=jobs, progress=progress)
    command = "kvspread simulate serving " + " ".join(
        [
            f"--duration {cfg.duration_s:g}",
            f"--policies {','.join(policies)}",
            f"--seeds {','.join(map(str, seeds))}",
            f"--jobs {jobs}",
        ]
        + ([f"--config {args.config}"] if getattr(args, "config", None) else [])
    )
    write_outputs(exp, out, command)
    print(markdown_table(exp.summary))
    print(
        f"\n{sum(r['requests'] for r in exp.rows):,} scored requests, {exp.wall_s:.1f} s wall; "
        f"outputs in {out}/serving_*"
    )
    return 0
