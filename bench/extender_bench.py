"""Latency and CPU of the extender's /filter and /prioritize over HTTP with keep-alive,
against a minimal Go extender measured in the same run.

For each cluster size (default 100, 500, 1,000, 5,000 nodes) a real uvicorn server
(bench/extender_server.py, its node cache filled with the same synthetic nodes the way the
list+watch reflector fills it) runs in its own process on 127.0.0.1, and so does the Go
floor (bench/gofloor/main.go: net/http + encoding/json, decodes the ExtenderArgs and answers
with every node, no scoring), built here when `go` is on PATH. This process posts the
ExtenderArgs kube-scheduler would send, in both nodeCacheCapable modes, over one keep-alive
connection to each (http.client, like the Go client's pooled connection), one request to
each in turn so that both see the same machine load, and prints per verb: p50/p99 of the
round trip, the Go floor's, the bare JSON floor (json.loads + json.dumps of the same body
in this process, stdlib) and each server's CPU time per request (its process's user +
system time over the cell, from /proc).

    python bench/extender_bench.py                         # full tables (a few minutes)
    python bench/extender_bench.py --nodes 500 --requests 200
    python bench/extender_bench.py --memory 1000           # RSS check, 5,000-node NodeLists
    python bench/extender_bench.py --cpu-only              # decision CPU in process, no HTTP,
                                                           # and the answer apart from the bookkeeping

Targets (issue 10): p99 of /prioritize names-only <= 5 ms at 500 nodes (moonshot <= 1.5x
Go) and <= 25 ms at 5,000 (moonshot <= 2x Go); full NodeList p99 <= 2x the bare JSON floor
at 500 nodes and <= 1.5x at 5,000 (moonshot <= 1x Go). Memory: RSS after 1,000 full-NodeList
requests at 5,000 nodes within 50 MB of its level after the first.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.extender_nodes import filled_extender, request_body, synthetic_nodes  # noqa: E402
from tests.ports import free_port, wait_http_ok  # noqa: E402


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def rss_mib(pid: int) -> float:
    """Resident set size of process `pid`, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def start_server(nodes: int, ts: float) -> tuple[subprocess.Popen[bytes], int]:
    """The Python extender on a free port, its cache holding `nodes` synthetic nodes with
    signals measured at `ts` (the same nodes the client sends)."""
    port = free_port()
    cmd = [sys.executable, str(ROOT / "bench" / "extender_server.py")]
    proc = subprocess.Popen(
        [*cmd, "--nodes", str(nodes), "--port", str(port), "--signals-ts", repr(ts)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/readyz", 300, proc)
    except BaseException:
        proc.kill()  # never leave a server behind
        raise
    return proc, port


def build_go_floor(out_dir: Path) -> tuple[Path | None, str]:
    """(the Go floor binary, or None and why it is absent)."""
    go = shutil.which("go")
    if go is None:
        return None, "absent (no go on PATH)"
    exe = out_dir / "gofloor"
    env = {**os.environ, "GO111MODULE": "off", "CGO_ENABLED": "0"}
    env.setdefault("GOCACHE", str(out_dir / "gocache"))
    res = subprocess.run(
        [go, "build", "-o", str(exe), str(ROOT / "bench" / "gofloor" / "main.go")],
        env=env,
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        return None, f"absent (go build failed: {res.stderr.strip()[-300:]})"
    ver = subprocess.run([go, "version"], capture_output=True, text=True).stdout.strip()
    return exe, ver


def start_go(exe: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen(
        [str(exe), "-addr", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/readyz", 300, proc)
    except BaseException:
        proc.kill()
        raise
    return proc, port


@dataclass
class Target:
    """One server under test: its process, a keep-alive connection, samples."""

    proc: subprocess.Popen[bytes]
    port: int
    lat: list[float]
    cpu: float = 0.0

    def connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)


_HEADERS = {"Content-Type": "application/json", "Accept-Encoding": "gzip"}


def _post(conn: http.client.HTTPConnection, verb: str, body: bytes) -> float:
    t0 = time.perf_counter()
    conn.request("POST", "/" + verb, body=body, headers=_HEADERS)
    resp = conn.getresponse()
    data = resp.read()
    dt = time.perf_counter() - t0
    if resp.status != 200:
        raise RuntimeError(f"{verb}: HTTP {resp.status}: {data[:200]!r}")
    return dt


POD_UID = b'"a870ca4f-7d58-453e-ad90-bcda8736b853"'
"""The captured pod's UID (bench/extender_nodes.py scheduling_pod) as it stands in a body."""
POD_NAME = b'"llm-0"'


def nth_pod(body: bytes, i: int) -> bytes:
    """`body` for the i-th pod of a Deployment: its own UID and name, as kube-scheduler asks
    for each new replica (so the extender's ledger of its own picks changes every time)."""
    uid = f'"a870ca4f-7d58-453e-ad90-{i:012x}"'.encode()
    return body.replace(POD_UID, uid, 1).replace(POD_NAME, f'"llm-{i}"'.encode(), 1)


def shuffled_names(body: bytes, seed: int) -> bytes:
    """A names-only body with its NodeNames in another order (kube-scheduler lists the
    feasible nodes in the order its parallel filter checks end)."""
    doc = json.loads(body)
    random.Random(seed).shuffle(doc["NodeNames"])
    return json.dumps(doc).encode()


def measure(
    targets: list[Target],
    verb: str,
    body: bytes,
    n: int,
    warmup: int,
    same_pod: bool = False,
    shuffle: bool = False,
) -> list[float]:
    """Fill each target's `lat` and `cpu` (seconds per request); returns the JSON floor
    times. The targets and the floor are sampled in turn, so all see the same load. Each
    request asks for a new pod unless `same_pod` (the same pod re-scored every time), and
    with `shuffle` (names-only bodies) names the nodes in a new order."""
    assert POD_UID in body and POD_NAME in body, "the request body lost the bench pod"
    bodies = [shuffled_names(body, i) for i in range(warmup + n)] if shuffle else None
    conns = [t.connect() for t in targets]
    flo: list[float] = []
    cpu0: list[float] = []
    for i in range(warmup + n):
        if i == warmup:
            cpu0 = [cpu_s(t.proc.pid) for t in targets]
        base = body if bodies is None else bodies[i]
        one = base if same_pod else nth_pod(base, i)
        for t, c in zip(targets, conns, strict=True):
            dt = _post(c, verb, one)
            if i >= warmup:
                t.lat.append(dt)
        t0 = time.perf_counter()
        json.dumps(json.loads(body))
        if i >= warmup:
            flo.append(time.perf_counter() - t0)
    for t, c0 in zip(targets, cpu0, strict=True):
        t.cpu = (cpu_s(t.proc.pid) - c0) / n
    for c in conns:
        c.close()
    return flo


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
    from extender.wire import ExtenderArgs, encode_filter, encode_prioritize, parse_args

    print()
    print("In-process CPU time per request (time.process_time, best of 3 x", reps, "calls):")
    print()
    print("| nodes | mode | verb | CPU ms | JSON floor CPU ms | ratio |")
    print("|---:|---|---|---:|---:|---:|")
    for n in sizes:
        nodes = synthetic_nodes(n)
        running = filled_extender(n, nodes)
        ext = running.extender
        for mode, names_only in (("names-only", True), ("full NodeList", False)):
            body = request_body(nodes, names_only)
            k = reps if names_only or n <= 500 else max(2, reps * 500 // n)

            def floor(body: bytes = body) -> str:
                return json.dumps(json.loads(body))

            fl = _best_cpu(floor, k)
            for verb, encode in (("filter", encode_filter), ("prioritize", encode_prioritize)):
                call = getattr(ext, verb)

                def one(
                    call: Callable[[ExtenderArgs], Any] = call,
                    encode: Callable[[ExtenderArgs, Any], bytes] = encode,
                    body: bytes = body,
                ) -> bytes:
                    args = parse_args(body)
                    return encode(args, call(args))

                cpu = _best_cpu(one, k)
                print(
                    f"| {n} | {mode} | {verb} | {cpu * 1e3:.2f} | {fl * 1e3:.2f} | {cpu / fl:.2f} |",
                    flush=True,
                )


def split_table(sizes: list[int], calls: int = 400, warmup: int = 20) -> None:
    """The names-only /prioritize in process, a new pod every call: the answer (parse,
    decide, encode) apart from the bookkeeping the server runs after sending it (the ledger
    entry, metrics, explain, warming the next batch), p50/p99 of wall time per call."""
    from extender.wire import encode_prioritize, parse_args
    from kvspread.heap import keep_freed_memory

    keep_freed_memory()  # as the server does (extender/run.py: serve)
    print()
    print(f"In-process /prioritize, names-only, a new pod each of {calls} calls (ms):")
    print()
    print("| nodes | answer p50 | answer p99 | bookkeeping p50 | bookkeeping p99 |")
    print("|---:|---:|---:|---:|---:|")
    for n in sizes:
        nodes = synthetic_nodes(n)
        ext = filled_extender(n, nodes).extender
        body = request_body(nodes, True)
        answer: list[float] = []
        after: list[float] = []
        for i in range(warmup + calls):
            one = nth_pod(body, i)
            later: list[Callable[[], None]] = []
            t0 = time.perf_counter()
            encode_prioritize(args := parse_args(one), ext.prioritize(args, later))
            t1 = time.perf_counter()
            for job in later:
                job()
            if i >= warmup:
                answer.append(t1 - t0)
                after.append(time.perf_counter() - t1)
        cells = [pct(answer, 0.5), pct(answer, 0.99), pct(after, 0.5), pct(after, 0.99)]
        print(f"| {n} | " + " | ".join(f"{c * 1e3:.2f}" for c in cells) + " |", flush=True)


def _ms(x: float) -> str:
    return f"{x * 1e3:.2f}"


def latency_tables(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="kvspread-gofloor-") as tmp:
        exe, go_note = build_go_floor(Path(tmp))
        print(
            f"# extender latency, {platform.python_implementation()} {platform.python_version()}, "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start, "
            "loopback HTTP/1.1 keep-alive, "
            + ("the same pod every request" if args.same_pod else "a new pod every request")
            + (", node names in a new order every request" if args.shuffle_names else "")
        )
        print(f"# Go floor: {go_note}")
        rows: dict[str, list[str]] = {"prioritize": [], "filter": []}
        for n in args.nodes:
            ts = time.time()
            nodes = synthetic_nodes(n, ts=ts)
            proc, port = start_server(n, ts)
            go = start_go(exe) if exe is not None else None
            try:
                modes = (("names-only", True), ("full NodeList", False))
                for mode, names_only in modes[:1] if args.names_only else modes:
                    body = request_body(nodes, names_only)
                    # full NodeLists of thousands of nodes take long a round: fewer samples
                    reqs = (
                        args.requests
                        if names_only
                        else min(args.requests, max(60, args.requests * 1000 // n))
                    )
                    for verb in ("prioritize", "filter"):
                        py = Target(proc, port, [])
                        targets = [py] + ([Target(go[0], go[1], [])] if go else [])
                        shuffle = args.shuffle_names and names_only
                        flo = measure(
                            targets, verb, body, reqs, args.warmup, args.same_pod, shuffle
                        )
                        p99 = pct(py.lat, 0.99)
                        cells = [
                            str(n),
                            mode,
                            f"{len(body) / 1024:.0f} KiB",
                            _ms(pct(py.lat, 0.5)),
                            _ms(p99),
                        ]
                        if go:
                            g = targets[1]
                            cells += [
                                _ms(pct(g.lat, 0.5)),
                                _ms(pct(g.lat, 0.99)),
                                f"{p99 / pct(g.lat, 0.99):.2f}",
                            ]
                        else:
                            cells += ["-", "-", "-"]
                        cells += [_ms(pct(flo, 0.99)), f"{p99 / pct(flo, 0.99):.2f}", _ms(py.cpu)]
                        cells.append(_ms(targets[1].cpu) if go else "-")
                        rows[verb].append("| " + " | ".join(cells) + " |")
                        print(f"# done: {n} nodes, {mode}, /{verb}", file=sys.stderr, flush=True)
            finally:
                for p in (proc, go[0] if go else None):
                    if p is not None:
                        p.terminate()
                        p.wait(10)
        for verb, lines in rows.items():
            print()
            print(f"/{verb} (p50/p99 of the round trip, ms; CPU: the server process, ms/request)")
            print()
            print(
                "| nodes | mode | body | p50 | p99 | Go p50 | Go p99 | p99 / Go p99 | "
                "JSON floor p99 | p99 / JSON p99 | extender CPU | Go CPU |"
            )
            print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for line in lines:
                print(line)
        print(f"\n# load average {os.getloadavg()[0]:.1f} at the end")


def memory_check(requests: int, nodes: int, limit_mib: float = 50.0) -> bool:
    """RSS of the server after the first and after `requests` full-NodeList requests
    (filter and prioritize in turn); prints PASS/FAIL against `limit_mib` of growth."""
    ts = time.time()
    proc, port = start_server(nodes, ts)
    try:
        body = request_body(synthetic_nodes(nodes, ts=ts), False)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        _post(conn, "filter", body)
        first = rss_mib(proc.pid)
        peak = first
        for i in range(1, requests):
            _post(conn, "prioritize" if i % 2 else "filter", body)
            if i % 50 == 0:
                peak = max(peak, rss_mib(proc.pid))
        last = rss_mib(proc.pid)
        conn.close()
    finally:
        proc.terminate()
        proc.wait(10)
    grew = last - first
    ok = grew <= limit_mib
    print(
        f"memory, {nodes} nodes, {requests} full-NodeList requests "
        f"({len(body) / 2**20:.1f} MiB each): RSS after the first {first:.0f} MiB, "
        f"after the last {last:.0f} MiB (peak sampled {peak:.0f} MiB), growth {grew:+.0f} MiB "
        f"-> {'PASS' if ok else 'FAIL'} (limit +{limit_mib:.0f} MiB)"
    )
    return ok


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
    ap.add_argument(
        "--same-pod",
        action="store_true",
        help="re-score one pod every request (the extender may reuse its node batch); "
        "default: a new pod (UID, name) every request, as a scaling Deployment sends",
    )
    ap.add_argument(
        "--shuffle-names",
        action="store_true",
        help="names-only requests list the nodes in a new order every time, as kube-scheduler's "
        "parallel filter does (default: one order)",
    )
    ap.add_argument(
        "--names-only",
        action="store_true",
        help="only the names-only cells (nodeCacheCapable: true), not the full NodeList ones",
    )
    ap.add_argument(
        "--cpu-only",
        action="store_true",
        help="only the in-process tables: CPU per request, and the names-only prioritize's "
        "answer apart from its bookkeeping",
    )
    ap.add_argument(
        "--memory",
        type=int,
        metavar="REQUESTS",
        help="only the memory check: REQUESTS full-NodeList requests at the largest --nodes "
        "(5,000 by default); exit status 1 on FAIL",
    )
    args = ap.parse_args()
    if args.cpu_only:
        cpu_table(args.nodes, 20)
        split_table(args.nodes)
        return 0
    if args.memory:
        return 0 if memory_check(args.memory, max(args.nodes)) else 1
    latency_tables(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
