"""`kvspread simulate serving`: flags and the command body.

The `simulate` command (simulator/cli.py) creates the subparser and calls
`add_arguments(parser)`, then `run(args)`. Flags another part already defined on the same
parser (say a shared --out or --jobs) are left alone and read by the same dest names.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvspread.preflight import check_output_dir
from kvspread.settings import ConfigError, Layered, invalid, load_yaml
from simulator.seeds import parse_seeds
from simulator.serving.autoscalers import AUTOSCALERS, parse_autoscalers
from simulator.serving.config import SimConfig, config_from_mapping
from simulator.serving.experiment import (
    parse_policies,
    run_experiment,
    write_outputs,
)
from simulator.serving.mooncake import MooncakeWorkload
from simulator.serving.placement import POLICIES
from simulator.serving.presets import CLUSTERS, DEFAULT_CLUSTER, real_workload_mapping
from simulator.serving.report import markdown_table, seed_span
from simulator.serving.routing import DEFAULT_ROUTING, ROUTINGS, parse_routings
from simulator.serving.workloads import BUNDLED, WorkloadError, load_workload

__all__ = [
    "add_arguments",
    "run",
    "load_config",
    "build_config",
    "default_jobs",
    "command_line",
]

DEFAULT_SEEDS = "1..10"
DEFAULT_OUT = "kvspread-report"
DEFAULT_MEAN_TURNS = 2.0  # LMSYS-Chat-1M (Zheng et al., ICLR 2024), table 1


def _add(parser: argparse.ArgumentParser, flag: str, **kw: object) -> None:
    if flag in parser._option_string_actions:  # defined by the caller: keep theirs
        return
    parser.add_argument(flag, **kw)  # type: ignore[arg-type]


def _add_all_of(
    parser: argparse.ArgumentParser, flag: str, names: Sequence[str], what: str
) -> None:
    """A comma list of some of `names`, by default all of them."""
    every = ",".join(names)
    _add(
        parser,
        flag,
        default=every,
        metavar="LIST",
        help=f"comma-separated {what} (default {every})",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the serving simulation's flags to `parser`.

    --out, --jobs and --progress default to "not given" (SUPPRESS) so that a value set on
    `kvspread simulate` before the subcommand name still counts."""
    _add(
        parser,
        "--workload",
        action="append",
        metavar="SERVICE=PATH",
        help="drive SERVICE from a ServeGen client folder, an Azure-format CSV "
        "(TIMESTAMP,ContextTokens,GeneratedTokens[,NumImages]), a Mooncake trace (JSONL: "
        "timestamp ms, input_length, output_length, hash_ids; .jsonl or .jsonl.xz) or a "
        f"bundled name ({', '.join(BUNDLED)}); repeatable; a SERVICE the setup does not "
        "have is added as a text service with the default service settings (for a Mooncake "
        "trace: llama-3.1-8b, 128k context, 80 GiB per replica; the config's services: "
        "section sets its own). Default: the bundled real workloads",
    )
    _add(
        parser,
        "--cluster",
        choices=CLUSTERS,
        help=f"cluster and services of the real-workload setup (default {DEFAULT_CLUSTER}): "
        "small = 3 nodes x 4 shared GPUs, shared = 16 such nodes, whole-gpu = 16 nodes x 8 "
        "whole GPUs, chat a 4-GPU tensor-parallel Llama-3-70B",
    )
    _add(
        parser,
        "--hours",
        metavar="A-B",
        help="part of the ServeGen day to run, in hours (e.g. 10-11; sets the start and "
        "--duration; default 10-11)",
    )
    _add(
        parser,
        "--offset",
        type=float,
        metavar="SECONDS",
        help="start at this trace second of the ServeGen data instead (CSV traces always "
        "start at their first request)",
    )
    _add(
        parser,
        "--rate-scale",
        type=float,
        metavar="F",
        help="multiply every workload rate by F (default: the cluster's stated factor)",
    )
    _add(
        parser,
        "--multi-turn",
        type=float,
        nargs="?",
        const=DEFAULT_MEAN_TURNS,
        metavar="MEAN_TURNS",
        help="group the requests of traces without content ids (ServeGen, Azure, synthetic) "
        "into multi-turn conversations whose prompts re-send the history (mean turns per "
        f"conversation, default {DEFAULT_MEAN_TURNS:g} as LMSYS-Chat-1M; "
        "docs/serving-simulation.md). Off unless given",
    )
    _add(
        parser,
        "--synthetic",
        action="store_true",
        help="the synthetic traffic model instead of real workloads (arrivals:/kinds: keys)",
    )
    _add(
        parser,
        "--duration",
        type=float,
        metavar="SECONDS",
        help="simulated seconds per run after the warm-up (default 3600)",
    )
    _add_all_of(parser, "--policies", POLICIES, "placement policies")
    _add_all_of(parser, "--autoscalers", AUTOSCALERS, "autoscalers")
    _add(
        parser,
        "--routing",
        default=DEFAULT_ROUTING,
        metavar="POLICY[,POLICY...]",
        help=f"request routing to replicas: {', '.join(ROUTINGS)} (default {DEFAULT_ROUTING}, "
        "the fewest requests in flight; round-robin is what a Service does and the baseline "
        "of the routing comparison when given)",
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
        default=argparse.SUPPRESS,
        metavar="DIR",
        help=f"output folder (default ./{DEFAULT_OUT}); files are prefixed serving_",
    )
    _add(
        parser,
        "--jobs",
        type=int,
        default=argparse.SUPPRESS,
        metavar="N",
        help="worker processes, one run each (default: the CPU count)",
    )
    _add(
        parser,
        "--config",
        metavar="FILE",
        help="YAML overriding the cost model, workload, cluster, HPA "
        "(keys: docs/serving-simulation.md)",
    )
    _add(
        parser,
        "--rate",
        type=float,
        metavar="RPS",
        help="base request rate of the synthetic traffic (overrides arrivals.rate_rps)",
    )
    _add(
        parser,
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=argparse.SUPPRESS,
        help="progress on stderr (default on: a bar on a terminal, a line every 10 %% otherwise)",
    )


def _hours(text: str) -> tuple[float, float]:
    try:
        a, b = (float(x) for x in text.split("-", 1))
    except ValueError:
        raise ConfigError(f"--hours: {text!r}: expected A-B in hours, e.g. 10-11") from None
    if not 0 <= a < b <= 24:
        raise ConfigError(f"--hours: {text!r}: need 0 <= A < B <= 24 (the ServeGen day)")
    return a, b


def _workload_flags(values: list[str] | None) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for v in values or []:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--workload: {v!r}: expected SERVICE=PATH")
        try:
            load_workload(path)
        except WorkloadError as exc:
            raise ConfigError(f"--workload {name}: {exc}") from None
        out[name] = {"path": path}
    return out


def build_config(args: argparse.Namespace) -> SimConfig:
    """Defaults < the real-workload preset (unless --synthetic) < YAML < flags."""
    synthetic = bool(getattr(args, "synthetic", False))
    if getattr(args, "rate", None) is not None and not synthetic:
        raise ConfigError(
            "--rate: sets the synthetic traffic's base rate; add --synthetic, or scale the "
            "real workloads with --rate-scale"
        )
    data: dict[str, Any] = (
        {}
        if synthetic
        else real_workload_mapping(getattr(args, "cluster", None) or DEFAULT_CLUSTER)
    )
    preset = set(data.get("services") or {})
    _merge(data, load_yaml(getattr(args, "config", None)))
    flags = _workload_flags(getattr(args, "workload", None))
    if flags:
        if synthetic:
            raise ConfigError("--workload and --synthetic: give one or the other")
        wl = dict(data.get("workloads") or {})
        wl.update(flags)
        data["workloads"] = wl
        services = data.setdefault("services", {})
        for name in flags:  # a new service name: a text service with the defaults
            if not isinstance(services, dict) or name in preset:
                continue
            given = services.get(name, {})
            if name not in SimConfig().services and isinstance(given, dict):
                # the new service's defaults, the config's own keys for it on top
                services[name] = {**new_service(flags[name]["path"]), **given}
    duration = getattr(args, "duration", None)
    hours = getattr(args, "hours", None)
    if hours is not None:
        a, b = _hours(hours)
        data["workload_start_s"] = a * 3600.0
        if duration is not None and duration != (b - a) * 3600.0:
            raise ConfigError(
                f"--hours {hours} and --duration {duration:g}: both set the length; give one "
                f"of them (--offset {a * 3600:g} --duration {duration:g} starts at {a:g} h)"
            )
        duration = (b - a) * 3600.0
    if getattr(args, "offset", None) is not None:
        if hours is not None:
            raise ConfigError("--hours and --offset: both set the start; give one of them")
        if not 0 <= args.offset < 86400:
            raise ConfigError(
                f"--offset: {args.offset!r}: must be 0 <= SECONDS < 86400 (the ServeGen day)"
            )
        data["workload_start_s"] = float(args.offset)
    turns = getattr(args, "multi_turn", None)
    if turns is not None:
        if not turns >= 1:
            raise ConfigError(f"--multi-turn: {turns!r}: the mean turns must be >= 1")
        data.setdefault("sessions", {})["mean_turns"] = float(turns)
    if getattr(args, "rate_scale", None) is not None:
        if not args.rate_scale > 0:
            raise ConfigError(f"--rate-scale: {args.rate_scale!r}: must be > 0")
        data["rate_scale"] = float(args.rate_scale)
    cfg = load_config_mapping(
        data, duration, getattr(args, "rate", None), getattr(args, "config", None)
    )
    for name, spec in cfg.workloads.items():  # a bad path from --config, before any run
        try:
            load_workload(spec.path)
        except WorkloadError as exc:
            raise ConfigError(f"workloads.{name}: {exc}") from None
    return cfg


LONG_CONTEXT_SERVICE: dict[str, Any] = {"model": "llama-3.1-8b", "gpu_memory_gib": 80.0}
"""A new service driven by a Mooncake trace (prompts up to 126k tokens): a 128k-context
model with a whole A100-80GB's memory for its KV cache."""


def new_service(path: str) -> dict[str, Any]:
    """Settings of a service that only `--workload` names: the defaults, or for a
    Mooncake trace `LONG_CONTEXT_SERVICE`."""
    wl = load_workload(path)
    return dict(LONG_CONTEXT_SERVICE) if isinstance(wl, MooncakeWorkload) else {}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> None:
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v


def load_config(
    path: str | None, duration: float | None = None, rate: float | None = None
) -> SimConfig:
    """Defaults < YAML file < flags; ConfigError names the bad key."""
    return load_config_mapping(load_yaml(path), duration, rate, path)


def load_config_mapping(
    mapping: dict[str, Any],
    duration: float | None = None,
    rate: float | None = None,
    source: str | None = None,
) -> SimConfig:
    """A YAML-shaped mapping (from `source`, for error messages) < --duration/--rate;
    validated."""
    data = Layered(mapping, None if source is None else str(source))
    path = source
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


def short_window_note(cfg: SimConfig, autoscalers: list[str]) -> str | None:
    """A note when the scored window is shorter than two scale-down windows of an HPA that
    runs: its scale-downs then barely happen inside it, and an autoscaler that saves GPUs by
    scaling down looks like one that never does (issue 25)."""
    windows = [cfg.slo_hpa.scale_down_window_s] if "slo" in autoscalers else []
    if any(a in ("request-rate", "queue-depth") for a in autoscalers):
        windows.append(cfg.hpa.scale_down_window_s)
    if not windows or cfg.duration_s >= 2 * max(windows):
        return None
    return (
        f"note: the scored window ({cfg.duration_s:g} s) is shorter than two scale-down "
        f"windows ({max(windows):g} s): scale-downs barely show; use --duration "
        f"{2 * max(windows):g} or more to compare GPU-hours"
    )


def _given(args: argparse.Namespace, name: str, default: str) -> str:
    """The flag's value as given (even empty), or `default` where it was not given."""
    value = getattr(args, name, None)
    return default if value is None else str(value)


def run(args: argparse.Namespace) -> int:
    """Run every policy x autoscaler x seed, write the outputs into args.out, print the
    table."""
    out = Path(getattr(args, "out", None) or DEFAULT_OUT)
    try:
        # an empty value given on purpose (`--seeds ''`) is an error, not the default
        seeds = parse_seeds(_given(args, "seeds", DEFAULT_SEEDS))
        policies = parse_policies(_given(args, "policies", ",".join(POLICIES)))
        autoscalers = parse_autoscalers(_given(args, "autoscalers", ",".join(AUTOSCALERS)))
        routings = parse_routings(getattr(args, "routing", DEFAULT_ROUTING))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    raw_jobs = getattr(args, "jobs", None)
    try:
        jobs = default_jobs() if raw_jobs is None else int(raw_jobs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"expected an integer, got {raw_jobs!r}", key="--jobs") from exc
    if jobs < 1:
        raise ConfigError(f"expected an integer >= 1, got {jobs!r}", key="--jobs")
    cfg = build_config(args)
    check_output_dir(out, "--out")  # after the config's checks, before any run
    note = short_window_note(cfg, autoscalers)
    if note:
        print(note, file=sys.stderr)
    progress = sys.stderr if getattr(args, "progress", True) is not False else None
    exp = run_experiment(
        cfg,
        policies,
        seeds,
        jobs=jobs,
        progress=progress,
        autoscalers=autoscalers,
        routings=routings,
    )
    write_outputs(exp, out, command_line(args, seeds, policies, autoscalers, routings))
    print(markdown_table(exp.summary))
    print(
        f"\n{sum(r['requests'] for r in exp.rows):,} scored requests, {exp.wall_s:.1f} s wall; "
        f"outputs in {out}/serving_*"
    )
    return 0


def command_line(
    args: argparse.Namespace,
    seeds: list[int],
    policies: list[str],
    autoscalers: list[str],
    routings: list[str] | None = None,
) -> str:
    """The command that reproduces this run, quoted for a shell."""
    parts: list[str] = []
    if getattr(args, "synthetic", False):
        parts.append("--synthetic")
    for v in getattr(args, "workload", None) or []:
        parts += ["--workload", v]
    flags = ("cluster", "hours", "offset", "rate_scale", "multi_turn", "duration", "rate", "config")
    for flag in flags:
        v = getattr(args, flag, None)
        if v is not None:
            parts += [f"--{flag.replace('_', '-')}", f"{v:g}" if isinstance(v, float) else str(v)]
    parts += ["--policies", ",".join(policies), "--autoscalers", ",".join(autoscalers)]
    if routings and routings != [DEFAULT_ROUTING]:
        parts += ["--routing", ",".join(routings)]
    parts += ["--seeds", seed_span(seeds)]
    return "kvspread simulate serving " + shlex.join(parts)


def default_jobs() -> int:
    """--jobs default: the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)
