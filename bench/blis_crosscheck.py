"""Side by side with BLIS: the same requests through the serving simulation and BLIS.

    python3 bench/blis_crosscheck.py --blis build/blis/blis [--quick] [--mooncake PATH]
        [--no-prefix-cache | --mooncake-tree] [--kv-alloc step|prompt] [--ll-load blis|ours]

BLIS (github.com/inference-sim/inference-sim, Apache-2.0; build it with tools/blis/) is a
discrete-event simulator of vLLM clusters whose authors report 7-9 % median error against
real clusters. Both simulators get the same model (Llama-3.1-8B), GPU (H100 SXM), tensor
parallelism (1), replicas (--replicas, default 4), KV pool (blocks of 16 tokens), batch
limits (256 sequences, 2,048 batched tokens) and request stream:

- `servegen`: the bundled ServeGen language clients (Alibaba, 10:30 of their day);
- `mooncake`: the bundled Mooncake conversation trace (`mooncake-conv`, or --mooncake
  PATH), each request's prefix mapped to BLIS's flat TraceV2 prefix_group /
  prefix_length (bench/blis_trace.py says how).

each at three loads from light to near saturation, routed round-robin and least-loaded
(BLIS's live view, --snapshot-refresh-interval 0, as the simulation's routers see
engines). Prints one Markdown table: mean / p90 TTFT, mean TPOT, mean / p99 E2E,
throughput and prefix hit rate, each as `ours / BLIS (relative difference)`; exits 0
only when every figure is within 15 % at the two lower loads and 25 % at the highest.

Step costs (`--costs`): `blis` (default) gives the serving simulation BLIS's step costs
for this model and GPU, evaluated from BLIS's published trained-physics coefficients
(defaults.yaml at f90a1e3a) as this simulator's cost-model parameters, so the check
compares scheduling, batching, preemption, routing and queueing under one cost model
(`blis-physical`: the same with causal prefill attention and a mixed step's decode
tokens computed, this simulator's own step model, where BLIS's differs);
`kvspread` keeps this project's own cost model scaled to the H100 (what the difference
in prefill speed does: docs/serving-simulation.md). Both add BLIS's per-request API
overheads (alpha coefficients) the serving simulation has none of: alpha0 before the
engine queue, alpha2 per output token and alpha1 at the end, to the reported latencies.

Least-loaded routing in BLIS counts a request once between its dispatch and its arrival
in the engine queue (alpha0 later) and twice after (EffectiveLoad = QueueDepth + BatchSize
+ InFlightRequests, sim/routing.go), so requests arriving together pile onto one replica;
the Mooncake trace's timestamps are whole milliseconds and most requests share one.
`--spread-ms MS --no-api-overheads` spreads them and drops alpha, which removes that
effect (docs/serving-simulation.md has both tables). So that both simulators route
alike, our least-loaded router counts BLIS's EffectiveLoad by default (`--ll-load blis`,
bench/blis_router.py); `--ll-load ours` keeps the serving simulation's own count (each
request in flight once), which shows that gap.

KV blocks (`--kv-alloc`): BLIS, like vLLM V1's scheduler, takes blocks each step for the
tokens it schedules (a new request: its first chunk's), so more long prompts run at once
and a short pool preempts more; our engines do the same with `step` (the default here and
in the serving simulation, config.CostModel.kv_alloc); `prompt` is the serving
simulation's earlier model (a whole prompt reserved at admission). Each row also prints both simulators' preemptions and our hit rate
as vLLM counts it (a preempted request's lookups apart), which BLIS's output cannot give.

Prefix caching is on in both (BLIS has no switch for it: its KV cache always keys
full prompt blocks by a hash chain and reuses them; the serving simulation's engines
cache blocks of requests that carry block_hashes, simulator.serving.prefixcache): our
requests get a hash chain over their 16-token blocks equal where the flat TraceV2 groups
give BLIS the same tokens (bench/blis_trace.py block_hashes), so both share exactly the
same prefixes. Both hit rates are BLIS's: blocks found cached over those plus blocks
newly taken, prompt and output, on every admission (BLIS's KVCacheState.CacheHitRate). `--no-prefix-cache` drops
the shared prefixes in both (nothing to hit). `--mooncake-tree` gives the serving
simulation the trace's whole block tree while BLIS keeps the flat groups: how much the
flat mapping understates reuse, and what that does to our latencies.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.blis_compare import Done, Figures, Row, figures, table, tolerance, within
from bench.blis_router import BlisLeastLoaded
from bench.blis_trace import (
    StreamRequest,
    block_hashes,
    map_mooncake,
    read_mooncake,
    reuse_bounds,
    spread_ties,
    write_tracev2,
)
from simulator.serving.config import SimConfig, config_from_mapping
from simulator.serving.costmodel import kv_pool_tokens
from simulator.serving.presets import DAY_START_S
from simulator.serving.sim import Simulation
from simulator.serving.workload import Request
from simulator.serving.workloads import BUNDLED, load_workload, workload_requests

__all__ = ["COSTS", "ROUTINGS", "Setup", "our_config", "main"]

BLIS_MODEL = "meta-llama/llama-3.1-8b-instruct"
"""The model both run: BLIS's name (its model_configs/llama-3.1-8b-instruct/config.json)."""

# BLIS's published coefficients (defaults.yaml, trained_physics_coefficients, at
# f90a1e3a). Alpha, microseconds: API queueing, post-decode fixed overhead, per output
# token; `--no-api-overheads` gives BLIS zeros and the betas explicitly (it takes both).
ALPHAS_US = (15563.199579, 777.3455, 45.907545)
BETAS = "0.152128,0.0,1.36252915,0.752037,32.09546717,4.41684444,126.024825,481.8613888,0.0,1.94710771,0.752037"

# Llama-3.1-8B (HF config.json, also BLIS's model_configs): 32 layers, hidden 4096,
# 8 KV heads x 128, FFN 14336, 128k context; 8.03 B parameters = 16.06 GB in BF16;
# KV 2 x 32 x 8 x 128 x 2 B = 128 KiB per token.
MODEL = {"weights_gb": 16.06, "kv_bytes_per_token": 131_072, "max_model_len": 131_072}
H100 = {"name": "H100-SXM", "hbm_gib": 80.0, "bandwidth_tb_s": 3.35}  # NVIDIA datasheet

COSTS: dict[str, dict[str, float | str | bool]] = {
    # BLIS's trained-physics step time for this model on the H100: its defaults.yaml beta
    # coefficients (f90a1e3a) applied to its basis functions for Llama-3.1-8B (32 layers,
    # 13.96 GB of layer weights, 14.0 GFLOP per prefill token), as this cost model's
    # parameters (docs/serving-simulation.md, "Side by side with BLIS", has the
    # single-request probes that confirm them):
    # - every step: beta5 32.1 us x 32 layers + beta7 126 us = 1.153 ms (d0);
    # - weights: 13.96 GB x beta3 1.3625 / 3.35 TB/s = 5.676 ms, i.e. 16.06 GB at eta 0.844;
    # - KV reads x beta2b 1.947: kv_eta 1 / 1.947 = 0.514;
    # - per request in the batch: beta6 4.42 us;
    # - prefill: 6.829 ms fixed (weights + d0) + 14.0 GFLOP / 989.5 TFLOPS x beta1a 0.152
    #   = 2.146 us per token (466k tokens/s), plus attention: 4 x 32 layers x 32 heads x
    #   128 FLOPs per token pair / 989.5 TFLOPS x 0.152 = 0.0805 ns per token pair.
    "blis": {
        "decode_d0_ms": 1.153,
        "eta": 0.8443,
        "kv_eta": 0.5136,
        "step_seq_us": 4.417,
        "prefill_p0_ms": 6.829,
        "prefill_tok_s": 466_000.0,
        "prefill_attn_ns": 0.0805,
        # BLIS charges every chunk's attention against the whole prompt and no compute
        # for the decode tokens of a mixed step (beta2a 0)
        "prefill_attn_context": "prompt",
        "mixed_decode_compute": False,
    },
    # the same coefficients with attention as causal attention computes it (each chunk
    # against the tokens before it) and a mixed step's decode tokens computed with its
    # prompt tokens: this simulator's step model (docs/serving-simulation.md)
    "blis-physical": {},
    # this project's cost model (config.CostModel, fitted to TensorRT-LLM A100 data) on
    # the H100: prefill throughput x 989.5 / 312 (dense BF16 peak TFLOPS, NVIDIA H100 SXM
    # and A100 datasheets), decode from the H100's 3.35 TB/s at the same eta.
    "kvspread": {"prefill_tok_s": 16_000.0 * 989.5 / 312.0},
}
COSTS["blis-physical"] = {
    **COSTS["blis"],
    "prefill_attn_context": "chunk",
    "mixed_decode_compute": True,
}
"""Cost-model parameters (config.CostModel fields) of each `--costs` choice."""

ROUTINGS = {"round-robin": "round-robin", "least-loaded": "least-request"}
"""BLIS routing policy -> the serving simulation's router of the same rule."""

# Loads (light .. near saturation) as mean request rates for 4 replicas; scaled by
# replicas / 4. ServeGen: the language clients' rate scaled to it; Mooncake: the trace
# (3.4 requests/s, mean prompt 12k tokens) replayed faster by time_scale.
SERVEGEN_RPS = (60.0, 120.0, 180.0)
SERVEGEN_START_S = DAY_START_S + 1800.0
"""10:30 of the ServeGen day: the busiest 10 minutes of the 10:00 hour (10:00-10:10 is
idle for these clients), so a 600 s stream has traffic throughout."""
MOONCAKE_SCALE = (1.0, 1.75, 2.5)
LOAD_NAMES = ("light", "medium", "near saturation")
FULL_S = 600.0
"""Stream length of a full run, seconds (--quick: 120)."""
BLIS_TIMEOUT_S = 900.0
"""Longest one BLIS replay may take."""


@dataclass(frozen=True)
class Setup:
    """What both simulators share."""

    replicas: int
    costs: str
    prefix_cache: bool
    seed: int
    api_overheads: bool = True
    tree: bool = False
    """Our requests carry the Mooncake trace's full block tree (BLIS still the flat groups)."""
    kv_alloc: str = "step"
    """When our engines take KV blocks (config.CostModel.kv_alloc): `step`, for each step's
    scheduled tokens as vLLM V1 and BLIS do, or `prompt`, the whole prompt at admission."""
    ll_load: str = "blis"
    """Our least-loaded router's count: `blis` (BLIS's EffectiveLoad, bench/blis_router.py:
    the same routing in both simulators, what the check is for) or `ours` (requests in the
    engine, once, as the serving simulation's least-request router counts)."""

    @property
    def alphas_s(self) -> tuple[float, float, float]:
        """BLIS's alpha0..alpha2 in seconds (zeros without API overheads)."""
        a0, a1, a2 = ALPHAS_US if self.api_overheads else (0.0, 0.0, 0.0)
        return a0 * 1e-6, a1 * 1e-6, a2 * 1e-6


def our_config(setup: Setup, span_s: float) -> SimConfig:
    """The serving simulation's config for one run: one node of `replicas` whole H100s,
    one service at fixed replicas (autoscaler none), engines ready at t=0."""
    mapping = {
        "duration_s": max(span_s, 1.0),
        "warmup_s": 0.0,
        "gpu": H100,
        "cost": {
            "max_num_seqs": 256,
            "chunk_tokens": 2048,
            "kv_alloc": setup.kv_alloc,
            **COSTS[setup.costs],
        },
        "cluster": {"nodes": 1, "gpus_per_node": setup.replicas, "slots_per_gpu": 1},
        "background": {"gpu_fraction": 0.0},
        "models": {"llama-3.1-8b": MODEL},
        "kinds": {"image": {"share": 0.0}, "multi-image": {"share": 0.0}},
        "services": {
            "chat": None,
            "vision": None,
            "docs": None,
            "x": {
                "kind": "text",
                "model": "llama-3.1-8b",
                "qos": "realtime",
                "gpu_memory_gib": H100["hbm_gib"],
                "min_replicas": setup.replicas,
                "max_replicas": setup.replicas,
                "initial_replicas": setup.replicas,
            },
        },
        "startup": {
            "load_s": 0.0,
            "cold_load_s": 0.0,
            "multimodal_extra_s": 0.0,
            "visible_s": 0.0,
            "cold_visible_s": 0.0,
        },
    }
    return config_from_mapping(mapping)


def pool_blocks(cfg: SimConfig) -> int:
    """KV blocks of one replica (both simulators get this pool)."""
    model = cfg.models["llama-3.1-8b"]
    return kv_pool_tokens(cfg.cost, model, cfg.gpu.hbm_gib) // cfg.cost.block_tokens


def servegen_stream(rps: float, span_s: float, seed: int) -> list[StreamRequest]:
    """The bundled ServeGen language clients from SERVEGEN_START_S, scaled to `rps` on
    average."""
    wl = load_workload("servegen-language")
    scale = rps / wl.mean_rate(SERVEGEN_START_S, SERVEGEN_START_S + span_s)
    reqs = workload_requests(wl, "x", "text", seed, 0, SERVEGEN_START_S, span_s, scale)
    reqs.sort(key=lambda r: r.arrival)
    return [StreamRequest(i, r.arrival, r.prompt, r.out) for i, r in enumerate(reqs)]


def mooncake_stream(
    path: Path, time_scale: float, span_s: float, prefixes: bool
) -> tuple[list[StreamRequest], tuple[float, float]]:
    """The Mooncake trace's first `span_s` seconds at `time_scale`, prefixes mapped (or
    dropped with `prefixes` false); also the trace's and the mapping's reuse bounds."""
    records = read_mooncake(path)
    stream = map_mooncake(records, time_scale)
    bounds = reuse_bounds(records, stream)
    keep = [s for s in stream if s.arrival_s < span_s]
    if not prefixes:
        keep = [dataclasses.replace(s, prefix_group="", prefix_length=0) for s in keep]
    return keep, bounds


@dataclass(frozen=True)
class Extra:
    """What the table leaves out: preemptions and, for ours, the hit rate as vLLM counts it."""

    preemptions: int
    vllm_hit_rate: float = math.nan
    """Prompt tokens found cached over prompt tokens looked up, first admissions only: a
    preempted request's lookups are counted apart (vLLM PrefixCacheStats.record)."""


def run_ours(setup: Setup, stream: Sequence[StreamRequest], routing: str) -> tuple[Figures, int]:
    """The serving simulation on `stream`; returns its figures and requests not done."""
    f, left, _ = run_ours_extra(setup, stream, routing)
    return f, left


def run_ours_extra(
    setup: Setup, stream: Sequence[StreamRequest], routing: str
) -> tuple[Figures, int, Extra]:
    """`run_ours`, and its preemptions and vLLM-counted hit rate."""
    span = max((s.arrival_s for s in stream), default=0.0) + 1.0
    cfg = our_config(setup, span)
    a0, a1, a2 = setup.alphas_s
    reqs: list[Request] = []
    for s in stream:
        r = Request(s.rid, "x", "text", s.arrival_s + a0, s.prompt, (), s.out)
        if setup.prefix_cache:
            bt = cfg.cost.block_tokens
            r.block_hashes = block_hashes(s, bt, setup.tree)
            r.block_ends = tuple(bt * (i + 1) for i in range(len(r.block_hashes)))
        reqs.append(r)
    sim = Simulation(
        cfg, "kube-default", setup.seed, requests=reqs, autoscaler="none", routing=ROUTINGS[routing]
    )
    if routing == "least-loaded" and setup.ll_load == "blis":
        sim.router = BlisLeastLoaded(a0, setup.seed)
    sim.run()
    done: list[Done] = []
    hit = allocated = first_hit = first_query = 0
    bt = cfg.cost.block_tokens
    for r in reqs:
        if r.status != "ok":
            continue
        arrival = r.arrival - a0
        ttft = r.first_token - arrival + a2
        e2e = r.finish - arrival + a2 * r.out + a1
        done.append(Done(arrival, ttft, e2e, r.out))
        # BLIS's rate (KVCacheState CacheHits / (CacheHits + CacheMisses)): blocks found
        # cached over all blocks taken, prompt and output, on every admission (so a
        # preempted request's re-prefill counts its own blocks found again)
        hit += r.prefix_hit_tokens // bt
        allocated += r.prefix_hit_tokens // bt + r.kv_blocks_new
        if r.block_hashes:
            first_hit += r.prefix_hit_tokens - r.prefix_rehit_tokens
            first_query += r.prompt
    extra = Extra(sum(r.preemptions for r in reqs), first_hit / first_query if first_query else 0.0)
    return figures(done, hit / allocated if allocated else 0.0), len(reqs) - len(done), extra


def run_blis(
    blis: Path,
    setup: Setup,
    stream: Sequence[StreamRequest],
    routing: str,
    blocks: int,
    work: Path,
) -> tuple[Figures, int, Extra]:
    """BLIS replaying `stream` (written as TraceV2 into `work`); its figures, the
    requests it did not finish and its preemptions."""
    header, data = write_tracev2(stream, work / "trace")
    results = work / "results.json"
    span_us = int((max(s.arrival_s for s in stream) + 3600.0) * 1e6)
    cmd = [
        str(blis.resolve()), "replay", "--trace-header", str(header), "--trace-data", str(data),
        "--model", BLIS_MODEL, "--hardware", "H100", "--tp", "1",
        "--num-instances", str(setup.replicas), "--routing-policy", routing,
        "--snapshot-refresh-interval", "0", "--total-kv-blocks", str(blocks),
        "--block-size-in-tokens", "16", "--max-num-seqs", "256",
        "--max-num-batched-tokens", "2048", "--horizon", str(span_us),
        "--seed", str(setup.seed), "--results-path", str(results), "--log", "error",
    ]  # fmt: skip
    if not setup.api_overheads:
        cmd += ["--alpha-coeffs", "0,0,0", "--beta-coeffs", BETAS]
    proc = subprocess.run(
        cmd, cwd=blis.resolve().parent, capture_output=True, text=True, timeout=BLIS_TIMEOUT_S
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"blis replay exited {proc.returncode}: {tail[0]}")
    # BLIS prints its KV-cache section only when a value in it is non-zero
    m = re.search(r"Cache Hit Rate:\s*([0-9.eE+-]+)", proc.stdout)
    hit_rate = float(m.group(1)) if m else 0.0
    arrival = {s.rid: s.arrival_s for s in stream}
    done = [
        Done(arrival[int(r["request_id"])], r["ttft_us"] / 1e6, r["e2e_us"] / 1e6,
             int(r["output_tokens"]))
        for r in json.loads(results.read_text(encoding="utf-8"))
        if r.get("e2e_us", 0) > 0
    ]  # fmt: skip
    # BLIS prints preemptions per completed request (sim/cluster/metrics.go)
    m = re.search(r"Preemption Rate:\s*([0-9.eE+-]+)", proc.stdout)
    preempt = round(float(m.group(1)) * len(done)) if m else 0
    return figures(done, hit_rate), len(stream) - len(done), Extra(preempt)


Stream = tuple[str, int, str, list[StreamRequest]]
"""(stream name, load index, load label, requests)."""


def _streams(args: argparse.Namespace, setup: Setup, span: float) -> list[Stream]:
    out: list[Stream] = []
    k = setup.replicas / 4.0
    names = args.streams.split(",")
    for name in names:
        if name not in ("servegen", "mooncake"):
            raise SystemExit(f"blis_crosscheck: unknown stream {name!r} (servegen, mooncake)")
    if "servegen" in names:
        for i, (load, rps) in enumerate(zip(LOAD_NAMES, SERVEGEN_RPS, strict=True)):
            out.append(("servegen", i, f"{load} ({rps * k:g} rps)",
                        servegen_stream(rps * k, span, setup.seed)))  # fmt: skip
    if "mooncake" in names:
        path = args.mooncake or BUNDLED.get("mooncake-conv")
        if path is None or not Path(path).is_file():
            print(f"mooncake stream skipped: no trace at {path} (pass --mooncake PATH)")
            return out
        for i, (load, ts) in enumerate(zip(LOAD_NAMES, MOONCAKE_SCALE, strict=True)):
            stream, (tree, flat) = mooncake_stream(Path(path), ts * k, span, setup.prefix_cache)
            print(f"mooncake x{ts * k:g}: {len(stream)} requests; reusable: {tree:.1%} of "
                  f"the trace's blocks (tree), {flat:.1%} of prompt tokens as TraceV2 groups")  # fmt: skip
            out.append(("mooncake", i, f"{load} (x{ts * k:g})", stream))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="The serving simulation and BLIS on the same requests: one table, "
        "exit 0 only within tolerance (15 % at the two lower loads, 25 % near saturation)."
    )
    ap.add_argument(
        "--blis", required=True, type=Path, help="the BLIS binary (tools/blis/build.sh)"
    )
    ap.add_argument("--quick", action="store_true", help=f"120 s streams instead of {FULL_S:g} s")
    ap.add_argument("--streams", default="servegen,mooncake", help="servegen, mooncake or both")
    ap.add_argument(
        "--mooncake", type=Path, help="a Mooncake JSONL trace (default: the bundled one)"
    )
    ap.add_argument("--replicas", type=int, default=4, help="replicas in both (1..16)")
    ap.add_argument("--routing", default="round-robin,least-loaded", help="BLIS routing policies")
    ap.add_argument(
        "--costs",
        choices=sorted(COSTS),
        default="blis",
        help="step costs of the serving simulation (module docstring)",
    )
    ap.add_argument(
        "--no-prefix-cache",
        action="store_true",
        help="no shared prefixes in either (default: prefix caching on in both)",
    )
    ap.add_argument(
        "--mooncake-tree",
        action="store_true",
        help="our requests keep the Mooncake trace's whole block tree (BLIS: flat groups)",
    )
    ap.add_argument(
        "--spread-ms",
        type=float,
        default=0.0,
        help="spread requests that share an arrival time over this many ms (0..1000)",
    )
    ap.add_argument(
        "--no-api-overheads",
        action="store_true",
        help="leave out BLIS's per-request API overheads (alpha) in both",
    )
    ap.add_argument(
        "--kv-alloc",
        choices=("step", "prompt"),
        default="step",
        help="when our engines take KV blocks: each step's tokens (vLLM V1, BLIS; default) "
        "or the whole prompt at admission (the serving simulation's earlier model)",
    )
    ap.add_argument(
        "--ll-load",
        choices=("blis", "ours"),
        default="blis",
        help="what our least-loaded router counts: BLIS's EffectiveLoad (queue + batch + in "
        "flight, random ties; bench/blis_router.py; default) or requests in the engine, once "
        "(the serving simulation's least-request)",
    )
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)  # fmt: skip
    if not 0 <= args.spread_ms <= 1000:
        ap.error("--spread-ms must be 0..1000")
    if not 1 <= args.replicas <= 16:
        ap.error("--replicas must be 1..16")
    if not args.blis.is_file():
        ap.error(f"--blis {args.blis}: no such file (build it: tools/blis/README.md)")
    routings = [r.strip() for r in args.routing.split(",") if r.strip()]
    for r in routings:
        if r not in ROUTINGS:
            ap.error(f"--routing: unknown {r!r} (one of {', '.join(ROUTINGS)})")
    if args.mooncake_tree and args.no_prefix_cache:
        ap.error("--mooncake-tree needs prefix caching (leave out --no-prefix-cache)")
    setup = Setup(
        args.replicas,
        args.costs,
        not args.no_prefix_cache,
        args.seed,
        not args.no_api_overheads,
        args.mooncake_tree,
        args.kv_alloc,
        args.ll_load,
    )
    span = 120.0 if args.quick else FULL_S
    try:
        streams = _streams(args, setup, span)
    except (OSError, ValueError) as e:
        ap.error(f"--mooncake: {e}")
    blocks = pool_blocks(our_config(setup, span))
    print(f"Llama-3.1-8B, H100, TP 1, {setup.replicas} replicas of {blocks} KV blocks x 16 "
          f"tokens; costs {setup.costs}; prefix caching "
          f"{'off in both (no shared prefixes)' if not setup.prefix_cache else 'on in both'}"
          f"{' (ours: the Mooncake block tree)' if setup.tree else ''}; "
          f"our KV allocation per {setup.kv_alloc}, least-loaded counting {setup.ll_load}; "
          f"streams of {span:g} s\n")  # fmt: skip
    rows: list[Row] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="blis-crosscheck-") as tmp:
        for stream_name, li, load, raw in streams:
            stream = spread_ties(raw, args.spread_ms / 1000.0)
            for routing in routings:
                ours, ours_left, ox = run_ours_extra(setup, stream, routing)
                theirs, blis_left, bx = run_blis(
                    args.blis, setup, stream, routing, blocks, Path(tmp)
                )
                notes.append(f"- {stream_name} {load} {routing}: preemptions {ox.preemptions} "
                             f"/ {bx.preemptions}; ours excluding re-prefills of preempted "
                             f"requests (vLLM's prefix_cache_hits / queries): "
                             f"{ox.vllm_hit_rate:.3f} of prompt tokens")  # fmt: skip
                if ours_left or blis_left:
                    print(f"{stream_name} {load} {routing}: not finished: ours {ours_left}, "
                          f"BLIS {blis_left} of {len(stream)}")  # fmt: skip
                rows.append(Row(stream_name, load, routing, tolerance(li, 3), ours, theirs))
                off = within(rows[-1])
                print(f"{stream_name} {load} {routing}: {len(stream)} requests, "
                      f"{'outside: ' + ', '.join(off) if off else 'within'}", file=sys.stderr)  # fmt: skip
    print(table(rows))
    print("\nPreemptions (ours / BLIS) and our hit rate as vLLM counts it (BLIS's output has "
          "no per-request hits):")  # fmt: skip
    print("\n".join(notes))
    bad = [r for r in rows if within(r)]
    print(f"\n{len(rows) - len(bad)} of {len(rows)} rows within tolerance")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
