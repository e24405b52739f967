"""`kvspread simulate`: replay a GPU-cluster trace and a multimodal serving cluster.

    kvspread simulate                  quick evaluation of both, report in ./kvspread-report
    kvspread simulate placement ...    the FGD paper's trace replay (docs/simulator.md)
    kvspread simulate serving ...      the serving simulation (docs/serving-simulation.md)

Settings come from flags, then `KVSPREAD_SIMULATE_PLACEMENT_<KEY>` variables, then the `placement:`
section of `--config FILE` (which may also hold the extender's `scoring:` section).
"""

from __future__ import annotations

import argparse
import shlex
import time
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from kvspread.preflight import check_output_dir
from kvspread.settings import ConfigError, Setting, add_settings, gather, load
from simulator.replay.config import DEFAULT_OUT, DEFAULT_SEEDS
from simulator.seeds import parse_seeds

__all__ = [
    "register",
    "require_trace_data",
    "parse_policies",
    "run_placement",
    "run_quick",
]

PART = "simulate"
QUICK_SEEDS = (42, 43, 44)

PLACEMENT_EPILOG = """examples:
  kvspread simulate placement --jobs 2
      all 8 policies x seeds 42..51 on the default trace (about 4-5 min on 2 cores)
  kvspread simulate placement --policies fgd,kvspread --seeds 42..44 --out /tmp/r
  kvspread simulate placement --trace multigpu50 --jobs 2
  kvspread simulate placement --trace ./my_pods.csv --policies bestfit,kvspread
  kvspread simulate placement --policies fgd --tie-break random   (FGD without node order)
  kvspread simulate placement --stop-at 101 --seeds 42              (stop just past 100 %)

bundled traces: default, gpushare20..100, multigpu20..50 (simulator/data/traces/)
policies: random, dotproduct, gpuclustering, gpupacking, bestfit, fgd, kvspread,
          kvspread-k8s (with kube-scheduler's default plugins), kvspread-unrounded
"""

SERVING_EPILOG = """examples:
  kvspread simulate serving
      bundled real workloads (Azure conv, ServeGen), small cluster, 4 placements x
      5 autoscalers x seeds 1..10, one simulated hour each, paired CIs vs kube-default
  kvspread simulate serving --cluster whole-gpu --hours 10-11 --autoscalers request-rate,slo
  kvspread simulate serving --workload chat=./trace.csv --workload vision=./servegen/mm-image
  kvspread simulate serving --synthetic --config my-cluster.yaml --rate 40
      (keys of the YAML: docs/serving-simulation.md)
  kvspread simulate serving --policies kvspread --autoscalers slo --routing round-robin,kvspread
      request routing policies (also least-request, kv-queue), paired CIs vs round-robin

bundled workloads: azure-conv, servegen-mm-image, servegen-language (simulator/data/workloads/)
placements: kube-default, round-robin, memory-weighted, kvspread
autoscalers: none, fixed-peak (no HPA, every service sized for its peak rate),
             request-rate, queue-depth, slo (the adapter's SLO pressure, Value 1)
"""

TOP_EPILOG = """examples:
  kvspread simulate                       quick placement + serving report (<= 3 min):
                                          OUT/report.md, OUT/placement/, OUT/serving/
  kvspread simulate --out /tmp/report --jobs 2 --no-progress
  kvspread simulate placement --help      the trace replay
  kvspread simulate serving --help        the serving simulation
"""


def _positive_int(text: str) -> int:
    """`--jobs` of bare `kvspread simulate`: one line naming the flag when it is wrong."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


SETTINGS = [
    Setting("placement.trace", "pod list: a bundled name (default) or a CSV path"),
    Setting("placement.seeds", f"seeds, e.g. 42..51 or 42,43 (default {DEFAULT_SEEDS})"),
    Setting("placement.policies", "comma-separated policy names (default: all 8)"),
    Setting("placement.jobs", "worker processes (default: CPU count)", flag="--jobs"),
    Setting("placement.out", f"report folder (default ./{DEFAULT_OUT})", flag="--out"),
    Setting(
        "placement.extender_weight",
        "extender weight for kvspread-k8s (default 5)",
        flag="--extender-weight",
    ),
    Setting(
        "placement.stop_at",
        "stop once arrived demand passes PCT %% of capacity, 0 < PCT <= 130 (default: run to 130)",
        flag="--stop-at",
        metavar="PCT",
    ),
]


def parse_policies(text: str | list[str]) -> list[str]:
    """Comma-separated lower-case policy names -> list; ConfigError names the known ones."""
    from simulator.replay.policies import POLICIES

    items = text if isinstance(text, list) else str(text).split(",")
    names = [p.strip().lower() for p in items if p.strip()]
    unknown = [p for p in names if p not in POLICIES]
    if unknown or not names:
        raise ConfigError(
            f"--policies: unknown policy {', '.join(unknown) or '(none)'}; "
            f"known: {', '.join(POLICIES)}"
        )
    return list(dict.fromkeys(names))


def _show_progress(args: argparse.Namespace) -> bool:
    """On unless --no-progress: a bar on a terminal, a line every 10 % elsewhere."""
    return getattr(args, "progress", None) is not False


def _jobs(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """--jobs, else KVSPREAD_SIMULATE_JOBS, else the CPU count."""
    from simulator.serving.cli import default_jobs

    raw = getattr(args, "jobs", None) or environ.get("KVSPREAD_SIMULATE_JOBS") or 0
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"KVSPREAD_SIMULATE_JOBS: {raw!r}: not an integer") from None
    return value if value >= 1 else default_jobs()


def _placement_settings(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, Any]:
    """flag > env > the `placement:` section of --config > defaults, strictly loaded."""
    from simulator.replay.config import ReplayConfig

    merged = gather(PART, SETTINGS, args, environ, getattr(args, "config", None))
    cfg = load(ReplayConfig, merged)
    section = {f.name: getattr(cfg.placement, f.name) for f in fields(cfg.placement)}
    for key in ("seeds", "policies"):
        if isinstance(section[key], tuple):
            section[key] = list(section[key])
    # no scoring section: the policies' own default (the extender's defaults)
    return {**section, "scoring": cfg.scoring if "scoring" in merged else None}


def require_trace_data() -> None:
    """The replay needs the Alibaba node list, which neither the wheel nor the image
    carries (research-only data, simulator/replay/trace.py): say where it is found."""
    from simulator.replay import trace

    if not trace.DEFAULT_NODE_LIST.is_file():
        raise ConfigError(
            f"the Alibaba GPU trace is not here ({trace.TRACE_DIR} is absent): the wheel and "
            "the image leave this research-only data out (docs/data-licences.md); run from a "
            "clone of https://github.com/kvspread/kvspread, which holds it in "
            f"{trace.TRACE_IN_REPO.as_posix()}/ (pip install . there, or PYTHONPATH=the clone)"
        )


def run_placement(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """`kvspread simulate placement`: run, write the report folder, print the table."""
    require_trace_data()
    from simulator.replay.policies import DEFAULT_POLICIES
    from simulator.replay.report import write_report
    from simulator.replay.runner import Progress, ReplayJob, run_jobs
    from simulator.replay.trace import TraceError, load_pods
    from simulator.serving.report import seed_span

    s = _placement_settings(args, environ)
    trace = str(s.get("trace") or "default")
    # an empty value given on purpose (`--seeds ''`) is an error, not the default
    seeds = parse_seeds(DEFAULT_SEEDS if s.get("seeds") is None else s["seeds"])
    policies = parse_policies(
        list(DEFAULT_POLICIES) if s.get("policies") is None else s["policies"]
    )
    jobs = s["jobs"] or _jobs(args, environ)
    out = Path(s["out"] if s["out"] != DEFAULT_OUT else getattr(args, "out", None) or DEFAULT_OUT)
    weight = s["extender_weight"]
    stop_at = s["stop_at"]
    try:
        load_pods(trace)
    except TraceError as exc:
        raise ConfigError(f"--trace: {exc}") from None
    extra: dict[str, Any] = {}
    if weight is not None:
        extra["extender_weight"] = float(weight)
    check_output_dir(out, "--out")
    todo = [
        ReplayJob(
            trace=trace,
            policy=p,
            seed=seed,
            stop_at_percent=stop_at,
            tie_break=args.tie_break,
            scoring=s["scoring"],
            **extra,
        )
        for p in policies
        for seed in seeds
    ]
    start = time.monotonic()
    results = run_jobs(todo, jobs, Progress(todo, _show_progress(args)))
    wall = time.monotonic() - start
    parts = ["--trace", trace, "--seeds", seed_span(seeds), "--policies", ",".join(policies)]
    if stop_at is not None:
        parts += ["--stop-at", f"{stop_at:g}"]
    if args.tie_break:
        parts += ["--tie-break", args.tie_break]
    if weight is not None:
        parts += ["--extender-weight", str(weight)]
    command = "kvspread simulate placement " + shlex.join(parts)
    md = write_report(results, out, command, wall)
    print(_first_table(md))
    print(
        f"\nreport: {out / 'placement.md'} "
        "(allocation.csv, frag_ratio.csv, placement_comparison.csv, plots)"
    )
    return 0


def _first_table(md: str) -> str:
    """The medians table of a placement report, for the terminal."""
    lines = md.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("| policy")), 0)
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end])


QUICK_POLICIES: tuple[str, ...] | None = None
"""The quick run's placement policies (None: all 8 defaults); tests make it smaller."""
QUICK_STOP_AT: float | None = None
"""The quick replay's --stop-at (None: run to 130 %); tests make it smaller."""
PLACEMENT_DIR = "placement"
SERVING_DIR = "serving"
"""Bare `kvspread simulate` keeps its two parts in these sub-folders of --out, so that
`kvspread simulate placement` and `kvspread simulate serving` writing into the same --out
(placement.md, allocation.csv, ..., serving_*) never overwrite the combined report's files,
nor it theirs."""


def run_quick(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """Bare `kvspread simulate`: a quick placement replay (3 seeds, all 8 policies) and a
    quick serving run on the bundled real workloads: `OUT/report.md` opens with the verdict
    of both; the parts' files are in `OUT/placement/` and `OUT/serving/`."""
    from simulator.replay.policies import DEFAULT_POLICIES
    from simulator.replay.report import (
        compare_placements,
        markdown_report,
        placement_verdict,
        write_report,
    )
    from simulator.replay.runner import Progress, ReplayJob, run_jobs
    from simulator.serving import quick as serving_quick
    from simulator.serving.report import opening_text

    require_trace_data()
    out = Path(getattr(args, "out", None) or environ.get("KVSPREAD_SIMULATE_OUT") or DEFAULT_OUT)
    jobs = _jobs(args, environ)
    check_output_dir(out, "--out")
    start = time.monotonic()
    policies = QUICK_POLICIES or DEFAULT_POLICIES
    todo = [
        ReplayJob("default", p, seed, stop_at_percent=QUICK_STOP_AT)
        for p in policies
        for seed in QUICK_SEEDS
    ]
    results = run_jobs(todo, jobs, Progress(todo, _show_progress(args)))
    placement_wall = time.monotonic() - start
    place_command = f"kvspread simulate placement --seeds {QUICK_SEEDS[0]}..{QUICK_SEEDS[-1]}"
    if policies != DEFAULT_POLICIES:
        place_command += " --policies " + ",".join(policies)
    if QUICK_STOP_AT is not None:
        place_command += f" --stop-at {QUICK_STOP_AT:g}"
    write_report(results, out / PLACEMENT_DIR, place_command, placement_wall)
    cmp = compare_placements(results)
    plots = ["unallocated.png", "frag_ratio.png"]
    placement_md = markdown_report(
        results, plots, place_command, placement_wall, "##", cmp, f"{PLACEMENT_DIR}/"
    )
    serving_start = time.monotonic()
    serving_md, serving_lines = serving_quick(
        out / SERVING_DIR, jobs, progress=_show_progress(args), link_dir=f"{SERVING_DIR}/"
    )
    serving_wall = time.monotonic() - serving_start
    total = time.monotonic() - start
    opening = [s for s in serving_lines if not s.startswith("How sure")]
    verdict = placement_verdict(results, cmp)
    if verdict:
        opening.append(verdict)
    opening += [s for s in serving_lines if s.startswith("How sure")]
    report = "\n".join(
        [
            "# kvspread simulation report",
            "",
            opening_text(opening),
            "",
            "Two parts: a replay of the Alibaba GPU trace against the FGD paper's published "
            "baselines (placement only), and a simulated serving cluster on real request "
            "mixes (Azure LLM trace 2023, Alibaba ServeGen) with placement and autoscaling. "
            f"Wall time: {total:.0f} s in all, {placement_wall:.0f} s for the placement "
            f"replay and {serving_wall:.0f} s for the serving part (simulation, statistics and "
            f"plots), {jobs} worker processes. Files: `{PLACEMENT_DIR}/` and `{SERVING_DIR}/` "
            "(each part's own report, CSVs and plots). "
            "This quick run is for a first look; the published tables (10 seeds, CIs) are in "
            "docs/evaluation.md.",
            "",
            placement_md,
            serving_md,
        ]
    )
    (out / "report.md").write_text(report)
    print(_first_table(placement_md))
    print(f"\nreport: {out / 'report.md'} (parts in {out / PLACEMENT_DIR}, {out / SERVING_DIR})")
    return 0


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], environ: Mapping[str, str]
) -> None:
    """Add `simulate` with its `placement` and `serving` subcommands."""
    fmt = argparse.RawDescriptionHelpFormatter
    top = sub.add_parser(
        "simulate",
        help="replay GPU traces and a multimodal serving cluster through kvspread's scoring",
        description="Quick evaluation of kvspread's placement (Alibaba GPU trace replay, "
        "against the FGD paper's baselines) and serving (multimodal cluster with HPA). "
        "Without a subcommand: a quick run of both (<= 3 min on 2 cores) that writes "
        "OUT/report.md, with each part's files in OUT/placement/ and OUT/serving/ (so the "
        "subcommands can share OUT without overwriting it).",
        epilog=TOP_EPILOG,
        formatter_class=fmt,
    )
    top.add_argument("--out", default=None, help=f"report folder (default ./{DEFAULT_OUT})")
    top.add_argument(
        "--jobs", type=_positive_int, default=None, help="worker processes (default: CPU count)"
    )
    top.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress on stderr (default on: a bar on a terminal, a line every 10 %% otherwise)",
    )
    top.set_defaults(func=lambda args: run_quick(args, environ))
    modes = top.add_subparsers(dest="simulate_mode", metavar="{placement,serving}")

    place = modes.add_parser(
        "placement",
        help="replay the Alibaba GPU trace (FGD paper's method)",
        description="Replay a pod list on the 1213 GPU nodes of the Alibaba trace: pods arrive "
        "until their GPU demand is 130 % of capacity and never leave; writes allocation.csv "
        "(published layout), frag_ratio.csv, placement_comparison.csv (kvspread against each "
        "baseline, paired by seed), plots and placement.md into --out.",
        epilog=PLACEMENT_EPILOG,
        formatter_class=fmt,
    )
    add_settings(place, PART, SETTINGS)
    place.add_argument("--config", default=None, metavar="FILE", help="YAML: placement:, scoring:")
    place.add_argument(
        "--tie-break",
        choices=("node-order", "random"),
        default=None,
        help="override how equal scores are resolved (default: node order for the published "
        "baselines, random for kvspread; see docs/simulator.md)",
    )
    place.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=argparse.SUPPRESS,
        help="progress on stderr (default on: a bar on a terminal, a line every 10 %% otherwise)",
    )
    _keep_parent_values(place)
    place.set_defaults(func=lambda args: run_placement(args, environ))

    serve = modes.add_parser(
        "serving",
        help="simulate a multimodal serving cluster (docs/serving-simulation.md)",
        description="Discrete-event simulation of a multimodal inference cluster on real "
        "request mixes: every placement x autoscaler pair on the same arrivals, compared "
        "with kube-default + request-rate by paired 95 % confidence intervals.",
        epilog=SERVING_EPILOG,
        formatter_class=fmt,
    )
    from simulator.serving import cli as serving_cli

    serving_cli.add_arguments(serve)
    _keep_parent_values(serve)
    serve.set_defaults(func=serving_cli.run)


def _keep_parent_values(parser: argparse.ArgumentParser) -> None:
    """--out/--jobs/--progress given before the subcommand (`kvspread simulate --out X
    serving`) must survive: a subparser's own default would overwrite them."""
    for action in parser._actions:
        if action.dest in ("out", "jobs", "progress"):
            action.default = argparse.SUPPRESS
