"""Latency of the extender's /filter and /prioritize over HTTP with keep-alive.

For each cluster size (100, 500, 1,000, 5,000 nodes) a real uvicorn server
(bench/extender_server.py, its node cache filled with the same synthetic nodes) runs in its
own process on 127.0.0.1; this process posts the ExtenderArgs kube-scheduler would send,
in both nodeCacheCapable modes, over one keep-alive connection (http.client, like the Go
client's pooled connection) and prints p50/p99 of the round trip. The floor is the time to
merely json.loads + json.dumps the same request body in this process.

    python bench/extender_bench.py                 # full table (a few minutes)
    python bench/extender_bench.py --nodes 500 --requests 200

Targets (issue 2): p99 <= 5 ms at 500 nodes names-only, <= 25 ms at 5,000 names-only,
full-NodeList p99 within 2x of the JSON floor.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.extender_nodes import request_body, synthetic_nodes  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def start_server(nodes: int) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "bench" / "extender_server.py"),
            "--nodes",
            str(nodes),
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(proc.stderr.read().decode() if proc.stderr else "server died")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                conn.close()
                return proc, port
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("server did not become ready")


def measure(
    port: int, verb: str, body: bytes, n: int, warmup: int
) -> tuple[list[float], list[float]]:
    """(request latencies, JSON floor times), sampled alternately so that both see the
    same machine load (the floor is json.loads + json.dumps of the same body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Content-Type": "application/json", "Accept-Encoding": "gzip"}
    lat: list[float] = []
    flo: list[float] = []
    for i in range(warmup + n):
        t0 = time.perf_counter()
        conn.request("POST", "/" + verb, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        dt = time.perf_counter() - t0
        if resp.status != 200:
            raise RuntimeError(f"{verb}: HTTP {resp.status}: {data[:200]!r}")
        t0 = time.perf_counter()
        json.dumps(json.loads(body))
        df = time.perf_counter() - t0
        if i >= warmup:
            lat.append(dt)
            flo.append(df)
    conn.close()
    return lat, flo


def _best_cpu(fn: Callable[[], object], k: int) -> float:
    """Best of 3 runs of k calls: process CPU seconds per call."""
    runs = []
    for _ in range(3):
        t0 = time.process_time()
        for _ in range(k):
            fn()
        runs.append((time.process_time() - t0) / k)
    return min(runs)


def cpu_table(sizes: list[int], reps: int) -> None:
    """Decision cost without HTTP, as process CPU time (robust to other load on the
    machine): parse + decide + encode in this process, against the JSON floor."""
    from bench.extender_nodes import synthetic_pods
    from extender.config import ExtenderConfig
    from extender.run import build
    from extender.wire import encode_filter, encode_prioritize, parse_args

    print()
    print("In-process CPU time per request (time.process_time, best of 3 x", reps, "calls):")
    print()
    print("| nodes | mode | verb | CPU ms | JSON floor CPU ms | ratio |")
    print("|---:|---|---|---:|---:|---:|")
    for n in sizes:
        nodes = synthetic_nodes(n)
        running = build(
            ExtenderConfig.from_mapping({"kubernetes": {"api_server": "http://127.0.0.1:9"}})
        )
        running.state.replace_nodes(nodes)
        running.state.replace_pods(synthetic_pods(n))
        ext = running.extender
        for mode, names_only in (("names-only", True), ("full NodeList", False)):
            body = request_body(nodes, names_only)
            k = reps if names_only or n <= 500 else max(2, reps * 500 // n)

            fl = _best_cpu(lambda body=body: json.dumps(json.loads(body)), k)
            for verb, encode in (("filter", encode_filter), ("prioritize", encode_prioritize)):
                call = getattr(ext, verb)

                def one(call=call, encode=encode, body=body) -> bytes:  # noqa: ANN001
                    args = parse_args(body)
                    return encode(args, call(args))

                cpu = _best_cpu(one, k)
                print(
                    f"| {n} | {mode} | {verb} | {cpu * 1e3:.2f} | {fl * 1e3:.2f} | {cpu / fl:.2f} |",
                    flush=True,
                )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--nodes", type=int, nargs="*", default=[100, 500, 1000, 5000])
    ap.add_argument(
        "--requests",
        type=int,
        default=300,
        help="measured requests per cell (full NodeList above 1,000 nodes: scaled down, at least 60)",
    )
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--cpu-only", action="store_true", help="only the in-process CPU table")
    args = ap.parse_args()
    if args.cpu_only:
        cpu_table(args.nodes, 20)
        return 0
    print(
        f"# extender latency, {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, loopback HTTP/1.1 keep-alive"
    )
    print(
        "| nodes | mode | verb | body | p50 ms | p99 ms | JSON floor p50 ms | floor p99 ms | p99 / floor p99 |"
    )
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for n in args.nodes:
        nodes = synthetic_nodes(n)
        proc, port = start_server(n)
        try:
            for mode, names_only in (("names-only", True), ("full NodeList", False)):
                body = request_body(nodes, names_only)
                # full NodeLists of thousands of nodes take ~1 s a round: fewer samples
                reqs = (
                    args.requests
                    if names_only
                    else min(args.requests, max(60, args.requests * 1000 // n))
                )
                for verb in ("filter", "prioritize"):
                    lat, fl = measure(port, verb, body, reqs, args.warmup)
                    ratio = pct(lat, 0.99) / pct(fl, 0.99)
                    print(
                        f"| {n} | {mode} | {verb} | {len(body) / 1024:.0f} KiB | "
                        f"{pct(lat, 0.5) * 1e3:.2f} | {pct(lat, 0.99) * 1e3:.2f} | "
                        f"{pct(fl, 0.5) * 1e3:.2f} | {pct(fl, 0.99) * 1e3:.2f} | {ratio:.2f} |",
                        flush=True,
                    )
        finally:
            proc.terminate()
            proc.wait(10)
    cpu_table(args.nodes, 20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
