"""What the cache-aware terms cost the picker: time added per pick, and the prefix index's
memory for 100 endpoints (issue 24's goals: <= 1 ms p50 added at 10 req/s, <= 64 MiB).

Per pick: `Picker.pick` in this process (body parsed -> decision, what the gRPC layer
calls), over 100 endpoints whose engine numbers come from one scrape (fresh, like vLLM's
cache_config_info: 27434 blocks of 16 tokens), on conversation-like bodies: one of 20
system prompts of 1-4k tokens, a history of 0-8 earlier turns, a new question (2-32k
characters in all, the Mooncake conversation trace's range). Two pickers, the cache terms
on (prefix and image indexes, the defaults) and off (`cache.prefix` and `cache.images`
false), take turns pick by pick, paced at `--rate` picks a second, so the machine's other
load falls on both alike; `added` is the on-picker's percentile minus the off-picker's.

Memory: the prefix index filled past its bound over 100 endpoints, measured with
tracemalloc (what Python allocated for it), against `cache.memory_mib`, and the bytes per
entry it measured against the estimate the bound uses (router/prefix.py ENTRY_BYTES).

    python bench/router_prefix_bench.py                 # 10 picks/s, 300 picks each
    python bench/router_prefix_bench.py --rate 10 --picks 600 --memory-mib 64
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvspread.engine import EngineSample  # noqa: E402
from router.config import RouterConfig  # noqa: E402
from router.endpoints import Endpoint, EndpointSet  # noqa: E402
from router.metrics import RouterMetrics  # noqa: E402
from router.picker import Picker  # noqa: E402
from router.prefix import ENTRY_BYTES, CacheConfig, PrefixIndex  # noqa: E402

ENDPOINTS = 100


def endpoints() -> list[Endpoint]:
    return [
        Endpoint(f"10.0.{i // 250}.{i % 250 + 1}:8000", f"http://10.0.0.{i}/metrics")
        for i in range(ENDPOINTS)
    ]


def sample(ep: Endpoint) -> list[EngineSample]:
    rng = random.Random(ep.address)
    return [
        EngineSample(
            "vllm",
            "m",
            kv_usage=rng.uniform(0.05, 0.6),
            kv_blocks_total=27434,
            block_size=16,
            running=float(rng.randrange(0, 40)),
            waiting=float(rng.randrange(0, 3)),
        )
    ]


def picker(cache: bool) -> Picker:
    doc = {
        "endpoints": {"static": [e.address for e in endpoints()]},
        "cache": {} if cache else {"prefix": False, "images": False},
    }
    cfg = RouterConfig.from_mapping(doc)
    eps = EndpointSet(cfg.metrics, scraper=sample)
    eps.replace(endpoints())
    eps.scrape_all()
    return Picker(cfg, eps, RouterMetrics(), explain_entries=100)


def bodies(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    systems = [f"system {k}: " + "policy text " * rng.randrange(350, 1400) for k in range(20)]
    out = []
    for _ in range(n):
        turns = rng.randrange(0, 9)
        msgs = [{"role": "system", "content": rng.choice(systems)}]
        for t in range(turns):
            msgs.append({"role": "user", "content": f"turn {t} " + "q" * rng.randrange(200, 2000)})
            msgs.append({"role": "assistant", "content": "a" * rng.randrange(200, 1500)})
        msgs.append({"role": "user", "content": "new question " * rng.randrange(5, 60)})
        out.append(json.dumps({"model": "m", "messages": msgs, "max_tokens": 256}).encode())
    return out


def pick_times(rate: float, picks: int) -> dict[str, list[float]]:
    pickers = {"on": picker(True), "off": picker(False)}
    work = bodies(picks, seed=24)
    times: dict[str, list[float]] = {"on": [], "off": []}
    start = time.perf_counter()
    step = 1.0 / rate / 2  # the two pickers alternate, each at `rate`
    for i, body in enumerate(work * 2):
        which = "on" if i % 2 == 0 else "off"
        delay = start + i * step - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        t0 = time.perf_counter()
        pickers[which].pick(body, {"x-request-id": str(i)}, None)
        times[which].append(time.perf_counter() - t0)
    return times


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[int(q) - 1]


def memory(memory_mib: float) -> tuple[int, int, int, int]:
    """(entries, measured bytes, estimated bytes, evictions) of a full index."""
    cfg = CacheConfig(memory_mib=memory_mib)
    tracemalloc.start()
    idx = PrefixIndex(cfg)
    before = tracemalloc.get_traced_memory()[0]
    addrs = [e.address for e in endpoints()]
    rng = random.Random(7)
    filled = 0
    while filled < 2 * cfg.max_entries:  # past the bound: evictions happen
        hashes = [rng.getrandbits(63) for _ in range(256)]
        idx.record(addrs[rng.randrange(len(addrs))], hashes, 27434 * 16)
        filled += len(hashes)
    measured = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return idx.entries, measured, idx.memory_bytes(), idx.evictions


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=10.0, help="picks a second, each picker")
    ap.add_argument("--picks", type=int, default=300, help="picks each picker")
    ap.add_argument("--memory-mib", type=float, default=64.0, help="cache.memory_mib")
    args = ap.parse_args(argv)
    if args.rate <= 0 or args.picks < 10 or args.memory_mib <= 0:
        ap.error("--rate and --memory-mib must be > 0 and --picks >= 10")
    t = pick_times(args.rate, args.picks)
    print(f"picker cost, {ENDPOINTS} endpoints, {args.picks} picks each at {args.rate:g}/s")
    print(f"{'':>10} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    for name in ("off", "on"):
        print(
            f"{'cache ' + name:>10} "
            + " ".join(f"{1e3 * pct(t[name], q):8.3f}" for q in (50, 95, 99))
        )
    print(
        f"{'added':>10} "
        + " ".join(f"{1e3 * (pct(t['on'], q) - pct(t['off'], q)):8.3f}" for q in (50, 95, 99))
    )
    entries, measured, estimated, evictions = memory(args.memory_mib)
    print(f"\nprefix index, {ENDPOINTS} endpoints, memory_mib {args.memory_mib:g}:")
    print(f"  entries {entries}, evictions {evictions}")
    print(
        f"  measured {measured / 2**20:.1f} MiB (tracemalloc), {measured / max(1, entries):.0f} B/entry"
    )
    print(f"  bound's estimate {estimated / 2**20:.1f} MiB ({ENTRY_BYTES} B/entry)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
