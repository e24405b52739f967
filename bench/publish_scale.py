"""How many signals writes a cluster makes: the real collector publisher
(bpf/publisher.py: `should_publish` + the per-node write budget) driven for every node of a
simulated cluster on a fake clock, every write counted with its size.

    python bench/publish_scale.py --nodes 5000 --seconds 1800

Each node runs the collector's cycle (`signals.interval_s`, 5 s) at its own phase (the
DaemonSet's pods start at different moments) with an 8-GPU H100 document. A share of the
nodes is busy (GPU memory moves past the threshold every cycle: pods starting, KV cache
filling), a share changes now and then, the rest are idle; only heartbeats keep those fresh.
Prints writes/s (whole run and steady state), bytes/s of documents and the longest gap
between two writes of a node (what the extender's staleness limit must cover).
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bpf.publish import PublishConfig  # noqa: E402
from bpf.publisher import Publisher  # noqa: E402
from kvspread.signals import GpuSignal, NodeSignals, encode_signals  # noqa: E402

GPUS = 8
GPU_MIB = 81559.0


@dataclass
class Result:
    nodes: int
    seconds: float
    writes: int = 0
    steady_writes: int = 0
    steady_from_s: float = 0.0
    document_bytes: int = 0
    max_document_bytes: int = 0
    max_gap_s: float = 0.0
    held_by_budget: int = 0
    per_window: list[int] = field(default_factory=list)

    @property
    def writes_per_s(self) -> float:
        return self.writes / self.seconds

    @property
    def steady_writes_per_s(self) -> float:
        return self.steady_writes / (self.seconds - self.steady_from_s)

    @property
    def bytes_per_s(self) -> float:
        return self.document_bytes / self.seconds

    @property
    def max_window_writes_per_s(self) -> float:
        """Busiest 100 s window after the start-up (the bound's own time scale)."""
        return max(self.per_window, default=0) / 100.0


def _document(node: str, rng: random.Random) -> NodeSignals:
    return NodeSignals(
        ts=0.0,
        node=node,
        gpus=tuple(
            GpuSignal(
                index=i,
                uuid=f"GPU-{rng.getrandbits(128):032x}",
                mem_total_mib=GPU_MIB,
                mem_used_mib=rng.uniform(0, GPU_MIB),
                util=round(rng.random(), 3),
                kv_blocks_total=27434,
                kv_blocks_used=rng.randrange(27434),
                models=("qwen2-vl-7b-instruct",),
            )
            for i in range(GPUS)
        ),
        streams=rng.randrange(64),
        image_token_share=round(rng.random(), 4),
        p95_s=round(rng.uniform(0.05, 2.0), 6),
    )


def simulate(
    nodes: int = 5000,
    seconds: float = 1800.0,
    config: PublishConfig | None = None,
    busy: float = 0.2,
    changing: float = 0.2,
    change_every_s: float = 60.0,
    interval_s: float = 5.0,
    steady_from_s: float = 300.0,
    seed: int = 12,
) -> Result:
    """Drive one real `Publisher` per node; a node's first publication is at its phase."""
    cfg = config or PublishConfig()
    rng = random.Random(seed)
    res = Result(nodes, seconds, steady_from_s=steady_from_s)
    windows = [0] * int(seconds // 100 + 1)
    last_write: list[float | None] = [None] * nodes

    def counter(i: int) -> object:
        def write(document: str) -> None:
            now = clock[0]
            n = len(document.encode())
            res.writes += 1
            res.document_bytes += n
            res.max_document_bytes = max(res.max_document_bytes, n)
            if now >= steady_from_s:
                res.steady_writes += 1
                windows[int(now // 100)] += 1
            prev = last_write[i]
            if prev is not None:
                res.max_gap_s = max(res.max_gap_s, now - prev)
            last_write[i] = now

        return write

    clock = [0.0]
    pubs = [
        Publisher(cfg, counter(i), encode_signals, random.Random(seed + i))  # type: ignore[arg-type]
        for i in range(nodes)
    ]
    docs = [_document(f"gpu-node-{i:05d}", rng) for i in range(nodes)]
    kinds = [
        "busy" if r < busy else "changing" if r < busy + changing else "idle"
        for r in (rng.random() for _ in range(nodes))
    ]
    next_change = [rng.uniform(0, change_every_s) for _ in range(nodes)]
    queue = [(rng.uniform(0, interval_s), i) for i in range(nodes)]
    heapq.heapify(queue)
    while queue:
        t, i = heapq.heappop(queue)
        if t >= seconds:
            continue
        clock[0] = t
        d = docs[i]
        moved = kinds[i] == "busy" or (kinds[i] == "changing" and t >= next_change[i])
        if moved:
            assert d.gpus is not None
            g0 = d.gpus[0]
            used = (g0.mem_used_mib + 4096.0) % GPU_MIB  # past the 512 MiB threshold
            d = replace(d, gpus=(replace(g0, mem_used_mib=used),) + d.gpus[1:])
            docs[i] = d
            next_change[i] = t + rng.expovariate(1.0 / change_every_s)
        pubs[i].offer(replace(d, ts=t))
        heapq.heappush(queue, (t + interval_s, i))
    for prev in last_write:  # the gap still open at the end counts too
        if prev is not None:
            res.max_gap_s = max(res.max_gap_s, seconds - prev - interval_s)
    res.held_by_budget = sum(p.held_by_budget for p in pubs)
    full = int((seconds - steady_from_s) // 100)
    first = int(steady_from_s // 100)
    res.per_window = windows[first : first + full]
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--seconds", type=float, default=1800.0)
    ap.add_argument("--busy", type=float, default=0.2, help="share of nodes changing every cycle")
    ap.add_argument("--changing", type=float, default=0.2, help="share changing every ~60 s")
    ap.add_argument("--max-interval-s", type=float, default=PublishConfig.max_interval_s)
    ap.add_argument("--writes-per-100s", type=float, default=PublishConfig.writes_per_100s)
    a = ap.parse_args()
    cfg = PublishConfig(max_interval_s=a.max_interval_s, writes_per_100s=a.writes_per_100s)
    r = simulate(a.nodes, a.seconds, cfg, a.busy, a.changing)
    bound = a.nodes / 100
    print(f"nodes {r.nodes}, {r.seconds:.0f} s simulated, bound {bound:.0f} writes/s")
    print(f"writes/s whole run      {r.writes_per_s:8.1f}  ({r.writes} writes)")
    rest = (r.writes - r.nodes) / r.seconds
    print(f"  without first writes  {rest:8.1f}  (each start writes once)")
    print(f"writes/s steady state   {r.steady_writes_per_s:8.1f}  (after {r.steady_from_s:.0f} s)")
    print(f"busiest 100 s window    {r.max_window_writes_per_s:8.1f}  writes/s")
    print(f"document bytes/s        {r.bytes_per_s:8.0f}  (max document {r.max_document_bytes} B)")
    print(f"longest gap per node    {r.max_gap_s:8.1f}  s")
    print(f"offers held by budget   {r.held_by_budget:8d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
