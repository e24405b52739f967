"""How much of the Mooncake trace's reuse one replica's prefix cache keeps.

    python3 bench/prefix_cache_mooncake.py [--rate-scale 0.2 0.5] [--pool-gib 80]

The bundled Mooncake conversation trace (one hour), thinned to each `--rate-scale`, in
arrival order through one engine (Llama-3.1-8B on an A100-80GB by default: its KV pool is
what `--pool-gib` of GPU memory leaves after the weights and the activation reserve), and
once more through one engine whose pool never evicts. Prints, per scale, the stream's own
reuse bound (the hit rate of an infinite cache) and the prefix hit rate each engine finds.
Arrivals go to the engine between its steps; numbers are simulated, not measured on GPUs.
"""

from __future__ import annotations

import argparse

from simulator.serving.config import CostModel, GpuSpec, ModelSpec
from simulator.serving.costmodel import kv_pool_tokens
from simulator.serving.engine import Engine
from simulator.serving.mooncake import MooncakeWorkload, reuse_bound
from simulator.serving.workload import Request
from simulator.serving.workloads import load_workload, workload_requests

LLAMA_31_8B = ModelSpec(16.0, 131_072, 131_072, False)


def replay(reqs: list[Request], pool_tokens: int) -> tuple[float, int]:
    """One engine, requests enqueued at their arrival; (prefix hit rate, blocks evicted)."""
    eng = Engine(CostModel(), GpuSpec(), LLAMA_31_8B, pool_tokens)
    t, i = 0.0, 0
    while True:
        while i < len(reqs) and reqs[i].arrival <= t:
            eng.enqueue(reqs[i])
            i += 1
        end = eng.plan(t, 1.0)
        if end is None:
            if i >= len(reqs):
                break
            t = reqs[i].arrival
            continue
        t = end
        eng.finish(t)
    hit = sum(r.prefix_hit_tokens for r in reqs)
    query = sum(r.prefix_query_tokens for r in reqs)
    return hit / max(query, 1), eng.prefix.evicted if eng.prefix is not None else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate-scale", type=float, nargs="+", default=[0.2])
    ap.add_argument("--pool-gib", type=float, default=80.0)
    args = ap.parse_args()
    wl = load_workload("mooncake-conv")
    assert isinstance(wl, MooncakeWorkload)
    pool = kv_pool_tokens(CostModel(), LLAMA_31_8B, args.pool_gib)
    print(f"one Llama-3.1-8B engine, KV pool {pool:,} tokens ({args.pool_gib:g} GiB)\n")
    print(
        "| rate scale | requests | reuse bound (tokens) | hit rate, this pool | hit rate, never evicting |"
    )
    print("|---:|---:|---:|---:|---:|")
    for scale in args.rate_scale:
        fresh = [
            sorted(
                workload_requests(wl, "m", "text", 1, 0, 0.0, wl.span_s, scale),
                key=lambda r: r.arrival,
            )
            for _ in range(2)
        ]
        _, bound = reuse_bound(fresh[0])
        hit, _ = replay(fresh[0], pool)
        unbounded, _ = replay(fresh[1], 1 << 32)
        print(f"| {scale:g} | {len(fresh[0]):,} | {bound:.1%} | {hit:.1%} | {unbounded:.1%} |")


if __name__ == "__main__":
    main()
