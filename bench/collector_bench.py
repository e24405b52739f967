"""Overhead of the node collector on a loopback HTTP/1.1 server.

    sudo python3 bench/collector_bench.py [--seconds 5] [--pairs 3] [--rss-requests 200000]
    sudo python3 bench/collector_bench.py --cpu-only --rate 5000 --seconds 20 --pairs 3

Measures (all printed as a Markdown table):

1. Throughput with and without the collector attached, in paired runs (order alternates
   so drift hits both sides); the loss is 1 - median(with / without). The client keeps 16
   keep-alive connections busy so the server is CPU-bound (a single ping-pong connection
   measures wake-up latency instead, which a busy collector can even improve). A third
   mode attaches only the BPF programs (events left unread): the in-kernel share.
2. Added latency per request: (a) the BPF programs' own run time per request, read from
   the kernel's BPF statistics (`kernel.bpf_stats_enabled`, run_time_ns / requests; it
   includes probe runs for every other process's syscalls on the machine), and (b) the
   client's p50 latency at 1k req/s without and with the collector (noisier).
3. Collector CPU share (user space, % of one core) and in-kernel BPF time at fixed
   request rates (1k and 5k req/s).
   With `--cpu-only`: CPU time per request at saturation instead (stable where throughput
   ratios are noisy): the traced server's CPU without and with the collector, the
   collector's own CPU and the BPF run time, over `--pairs` paired runs, with spread;
   `--rate R` (repeatable) paces the same 16 connections to R req/s instead, and the share
   of requests counted adds those over the budget (the kernel's own histogram). Then one
   row per BPF program the collector holds (its fds' prog_id, so other processes' programs
   are left out): run time and runs per request, ns per run, summed over the runs with it.
4. Collector RSS while `--rss-requests` requests go through (a new connection every 100
   requests, so the connection tables churn), sampled every 10 %; with the default
   200k requests the figure for 1 M requests is extrapolated from the slope.

The server is a small asyncio HTTP/1.1 server (one process), the client one process with
keep-alive sockets, and the collector the real `kvspread collector run` (standalone, NVML
off) in its own process. Needs root (BPF, bpf_stats). Nothing here asserts anything;
other processes on the machine add noise, so report the machine state with the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
UNSAMPLED = "kvspread_http_server_unsampled_request_duration_seconds"
RESPONSE = (
    b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{"ok": true}\n'
)
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
    b'Content-Length: 47\r\n\r\n{"messages":[{"role":"user","content":"hi"}]}\r\n'
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- server ---------------------------------------------------------------------------
class _Http(asyncio.Protocol):
    def connection_made(self, transport: Any) -> None:
        self.t = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while b"\r\n\r\n" in self.buf:
            head, _, rest = self.buf.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if len(rest) < length:
                return
            self.buf = rest[length:]
            self.t.write(RESPONSE)


def _pin(cpu: int) -> None:
    """Server on CPU 0, load generator on CPU 1: the scheduler cannot stack them on one
    CPU in some runs and not in others (a large source of run-to-run swings)."""
    if PIN and os.cpu_count() and os.cpu_count() > 1:  # type: ignore[operator]
        os.sched_setaffinity(0, {cpu})


PIN = True


def serve(port: int) -> None:
    _pin(0)
    loop = asyncio.new_event_loop()
    srv = loop.run_until_complete(loop.create_server(_Http, "127.0.0.1", port, backlog=1024))
    try:
        loop.run_forever()
    finally:
        srv.close()


# --- client ---------------------------------------------------------------------------
def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _one(s: socket.socket) -> None:
    s.sendall(REQUEST)
    got = 0
    while got < len(RESPONSE):
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("server closed")
        got += len(chunk)


def saturate(port: int, seconds: float, conns: int, out: Any, rate: float = 0.0) -> None:
    """Keep `conns` keep-alive connections busy (one request outstanding on each) so the
    server is CPU-bound: throughput then measures CPU cost, not wake-up latency. With
    `rate` > 0 requests are paced to that many per second over the same connections."""
    import selectors

    _pin(1)
    sel = selectors.DefaultSelector()
    socks = [_connect(port) for _ in range(conns)]
    got = {s.fileno(): 0 for s in socks}
    idle: list[socket.socket] = []  # paced: connections waiting for their next slot
    interval = 1.0 / rate if rate else 0.0
    start = time.perf_counter()
    next_at = start
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        if rate:
            idle.append(s)
        else:
            s.sendall(REQUEST)
    n = 0
    end = start + seconds
    while (now := time.perf_counter()) < end:
        while idle and now >= next_at:
            idle.pop().send(REQUEST)
            next_at += interval
        wait = 0.5 if not idle else max(0.0, min(0.5, next_at - now))
        for key, _ in sel.select(timeout=wait):
            s = key.fileobj  # type: ignore[assignment]
            data = s.recv(65536)
            if not data:
                raise ConnectionError("server closed")
            fd = s.fileno()
            got[fd] += len(data)
            while got[fd] >= len(RESPONSE):
                got[fd] -= len(RESPONSE)
                n += 1
                if rate:
                    idle.append(s)
                else:
                    s.send(REQUEST)
    elapsed = time.perf_counter() - start
    for s in socks:
        s.close()
    out.put({"requests": n, "seconds": elapsed})


def client(
    port: int, seconds: float, rate: float, max_requests: int, reconnect_every: int, out: Any
) -> None:
    """One connection, one request at a time, for `seconds` (or `max_requests`), at `rate`
    requests/s (0: as fast as possible); reports the median latency."""
    _pin(1)
    s = _connect(port)
    n = 0
    lat: list[int] = []
    start = time.perf_counter()
    end = start + seconds
    interval = 1.0 / rate if rate else 0.0
    next_at = start
    while True:
        now = time.perf_counter()
        if now >= end or (max_requests and n >= max_requests):
            break
        if interval:
            if now < next_at:
                time.sleep(next_at - now)
            next_at += interval
        if reconnect_every and n and n % reconnect_every == 0:
            s.close()
            s = _connect(port)
        t0 = time.perf_counter_ns()
        _one(s)
        if len(lat) < 200_000:
            lat.append(time.perf_counter_ns() - t0)
        n += 1
    s.close()
    out.put(
        {
            "requests": n,
            "seconds": time.perf_counter() - start,
            "p50_us": statistics.median(lat) / 1000 if lat else 0.0,
        }
    )


def run_saturated(
    port: int, seconds: float, conns: int = 16, rate: float = 0.0
) -> dict[str, float]:
    q: Any = mp.Queue()
    p = mp.Process(target=saturate, args=(port, seconds, conns, q, rate))
    p.start()
    res: dict[str, float] = q.get()
    p.join()
    return res


def run_client(
    port: int, seconds: float, rate: float = 0.0, max_requests: int = 0, reconnect_every: int = 0
) -> dict[str, float]:
    q: Any = mp.Queue()
    p = mp.Process(target=client, args=(port, seconds, rate, max_requests, reconnect_every, q))
    p.start()
    res: dict[str, float] = q.get()
    p.join()
    return res


# --- collector ------------------------------------------------------------------------
class Collector:
    def __init__(self, port: int, cache: Path) -> None:
        self.metrics_port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kvspread",
                "collector",
                "run",
                "--standalone",
                "--no-nvml",
                "--listen",
                "127.0.0.1",
                "--port",
                str(self.metrics_port),
                "--http-ports",
                str(port),
                "--header-cache",
                str(cache),
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()  # never leave a collector behind
            raise

    def _wait_ready(self) -> None:
        url = f"http://127.0.0.1:{self.metrics_port}/readyz"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                r = httpx.get(url, timeout=1)
                bpf = r.json()["sources"]["bpf"] if r.status_code == 200 else {}
                if bpf.get("up"):
                    return
                if bpf and bpf.get("reason") != "not started":  # still compiling otherwise
                    raise RuntimeError(f"collector up without BPF: {r.json()}")
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError("collector did not become ready")

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def requests_seen(self, family: str = "http_server_request_duration_seconds") -> float:
        """Requests in a histogram family of /metrics (default: those timed as events)."""
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(family + "_count")
        )

    def requests_counted(self) -> float:
        """Requests in either histogram: timed as events, or over the budget and
        aggregated in the kernel."""
        return self.requests_seen() + self.requests_seen(UNSAMPLED)

    def settle(self, quiet_s: float = 1.0, limit_s: float = 30.0) -> None:
        """Wait until the collector has read what the kernel buffered (its counts stop
        moving): on a loaded machine a niced collector lags the load generator."""
        last, since = self.requests_counted(), time.monotonic()
        deadline = since + limit_s
        while time.monotonic() < deadline:
            time.sleep(0.25)
            now = self.requests_counted()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def bpf_run_time_ns() -> tuple[int, int]:
    """Sum of run_time_ns and run_cnt over loaded tracepoint programs (bpf_stats)."""
    out = subprocess.run(
        ["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True
    ).stdout
    total = cnt = 0
    for p in json.loads(out):
        if p.get("type") == "tracepoint":
            total += int(p.get("run_time_ns", 0))
            cnt += int(p.get("run_cnt", 0))
    return total, cnt


def prog_stats(pid: int) -> dict[str, tuple[int, int]]:
    """run_time_ns and run_cnt of each BPF program process `pid` holds (its fds' prog_id in
    /proc/PID/fdinfo), by name: other processes' programs (tests on a shared machine) are
    left out. A tail-called program's time is counted in the program that called it."""
    ids: set[int] = set()
    fdinfo = Path(f"/proc/{pid}/fdinfo")
    for f in fdinfo.iterdir():
        try:
            for line in f.read_text().splitlines():
                if line.startswith("prog_id:"):
                    ids.add(int(line.split()[1]))
        except OSError:
            continue
    out = subprocess.run(
        ["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True
    ).stdout
    stats: dict[str, tuple[int, int]] = {}
    for p in json.loads(out):
        if p.get("id") in ids:
            t, c = stats.get(p.get("name", "?"), (0, 0))
            stats[p.get("name", "?")] = (
                t + int(p.get("run_time_ns", 0)),
                c + int(p.get("run_cnt", 0)),
            )
    return stats


def per_program_rows(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], n: float
) -> list[tuple[str, str]]:
    """One row per program that ran: runs and run time per request, ns per run."""
    rows = []
    diffs = {
        k: (after[k][0] - before.get(k, (0, 0))[0], after[k][1] - before.get(k, (0, 0))[1])
        for k in after
    }
    for name, (t, c) in sorted(diffs.items(), key=lambda kv: -kv[1][0]):
        if c <= 0:
            continue
        short = name.removeprefix("tracepoint__").replace("syscalls__", "")
        rows.append(
            (
                f"  {short}",
                f"{t / n / 1000:.3f} us per request, {c / n:.2f} runs per request, "
                f"{t / c:.0f} ns per run",
            )
        )
    return rows


def set_bpf_stats(on: bool) -> None:
    Path("/proc/sys/kernel/bpf_stats_enabled").write_text("1\n" if on else "0\n")


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (system time includes the BPF programs run
    in its syscalls)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} us (min {min(xs):.2f}, max {max(xs):.2f}, n={len(xs)})"


def cpu_per_request(
    port: int, server_pid: int, cache: Path, seconds: float, pairs: int, rate: float = 0.0
) -> list[tuple[str, str]]:
    """CPU time per request at saturation, stable where throughput ratios are not: the traced
    server's CPU without and with the collector, the collector's own CPU, and the BPF
    programs' run time (bpf_stats), over paired runs (order alternating)."""
    server_without: list[float] = []
    server_with: list[float] = []
    collector: list[float] = []
    kernel: list[float] = []
    kernel_own: list[float] = []  # less the idle rate of the programs (other processes)
    kernel_col: list[float] = []  # the collector's own programs only
    timed: list[float] = []
    counted: list[float] = []
    rates: list[float] = []
    rss: list[float] = []
    total = 0
    progs_before: dict[str, tuple[int, int]] = {}
    progs_after: dict[str, tuple[int, int]] = {}
    progs_n = 0.0
    set_bpf_stats(True)
    try:
        for i in range(pairs):
            for mode in ("without", "with") if i % 2 == 0 else ("with", "without"):
                col = Collector(port, cache) if mode == "with" else None
                try:
                    idle = 0.0
                    if col:  # the programs' run time without this traffic: other processes
                        i0, t0 = bpf_run_time_ns()[0], time.monotonic()
                        time.sleep(2.0)
                        idle = (bpf_run_time_ns()[0] - i0) / (time.monotonic() - t0)
                    s0, b0 = proc_cpu_s(server_pid), bpf_run_time_ns()[0]
                    p0 = prog_stats(col.proc.pid) if col else {}
                    c0 = col.cpu_s() if col else 0.0
                    seen0 = col.requests_seen() if col else 0.0
                    counted0 = col.requests_counted() if col else 0.0
                    res = run_saturated(port, seconds, rate=rate)
                    s1, b1 = proc_cpu_s(server_pid), bpf_run_time_ns()[0]
                    p1 = prog_stats(col.proc.pid) if col else {}
                    n = max(res["requests"], 1)
                    total += int(n)
                    rates.append(n / res["seconds"])
                    if col is None:
                        server_without.append((s1 - s0) / n * 1e6)
                        continue
                    col.settle()  # the collector drains its ring buffer
                    collector.append((col.cpu_s() - c0) / n * 1e6)
                    timed.append((col.requests_seen() - seen0) / n)
                    for k, (t, c) in p0.items():  # summed over the runs with the collector
                        bt, bc = progs_before.get(k, (0, 0))
                        progs_before[k] = (bt + t, bc + c)
                    for k, (t, c) in p1.items():
                        at, ac = progs_after.get(k, (0, 0))
                        progs_after[k] = (at + t, ac + c)
                    progs_n += n
                    kernel_col.append(
                        sum(t - p0.get(k, (0, 0))[0] for k, (t, _) in p1.items()) / n / 1000
                    )
                    server_with.append((s1 - s0) / n * 1e6)
                    kernel.append((b1 - b0) / n / 1000)
                    kernel_own.append(max(0.0, b1 - b0 - idle * res["seconds"]) / n / 1000)
                    # the kernel's over-budget histogram is read once per signals cycle (5 s)
                    col.settle(quiet_s=6.0)
                    counted.append((col.requests_counted() - counted0) / n)
                    rss.append(col.rss_mib())
                finally:
                    if col:
                        col.stop()
    finally:
        set_bpf_stats(False)
    what = f"paced at {rate:.0f} req/s" if rate else "saturated"
    return [
        (
            f"{what}, CPU per request ({total} requests in all, "
            f"{min(rates):.0f}-{max(rates):.0f} req/s achieved)",
            "",
        ),
        ("traced server CPU per request, without collector", _spread(server_without)),
        ("traced server CPU per request, with collector", _spread(server_with)),
        ("in-kernel BPF time per request (bpf_stats)", _spread(kernel)),
        (
            "in-kernel BPF time per request, less the programs' idle rate (other processes)",
            _spread(kernel_own),
        ),
        (
            "in-kernel BPF time per request, the collector's own programs only",
            _spread(kernel_col),
        ),
        ("collector process CPU per request", _spread(collector)),
        (
            "requests timed as events (median share)",
            f"{100 * statistics.median(timed):.1f} %",
        ),
        (
            "requests counted in a histogram, events + in-kernel (median share)",
            f"{100 * statistics.median(counted):.1f} %",
        ),
        ("collector RSS after each run (max)", f"{max(rss):.1f} MiB"),
        ("per program (the collector's own, all runs with it together)", ""),
        *per_program_rows(progs_before, progs_after, max(progs_n, 1.0)),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="length of each run")
    ap.add_argument("--pairs", type=int, default=3, help="paired throughput runs")
    ap.add_argument("--rss-requests", type=int, default=200_000)
    ap.add_argument("--no-pin", action="store_true", help="do not pin server and client CPUs")
    ap.add_argument(
        "--cpu-only",
        action="store_true",
        help="only the CPU-per-request runs at saturation (--pairs pairs of --seconds)",
    )
    ap.add_argument(
        "--rate",
        type=float,
        action="append",
        help="with --cpu-only: pace the load to this many req/s (repeatable; default saturated)",
    )
    args = ap.parse_args()
    global PIN
    PIN = not args.no_pin
    if os.geteuid() != 0:
        print("needs root (BPF)", file=sys.stderr)
        return 2
    port = free_port()
    server = mp.Process(target=serve, args=(port,), daemon=True)
    server.start()
    time.sleep(0.5)
    cache = Path("/tmp/kvspread-bench-headers")
    run_client(port, 1.0)  # warm up
    rows: list[tuple[str, str]] = []
    if args.cpu_only:
        assert server.pid is not None
        for rate in args.rate or [0.0]:
            rows += cpu_per_request(port, server.pid, cache, args.seconds, args.pairs, rate)
        print("| measure | value |\n|---|---|")
        for k, v in rows:
            print(f"| {k} | {v} |")
        server.terminate()
        return 0

    # 1 + 2b: paired throughput. "probes" = the BPF programs attached (loaded by this
    # process, events left unread) without the collector's user space: the in-kernel part.
    from bpf import loader

    ratios, base_rates, probe_ratios, reported = [], [], [], []
    for i in range(args.pairs):
        order = ("without", "with", "probes") if i % 2 == 0 else ("probes", "with", "without")
        res: dict[str, dict[str, float]] = {}
        for mode in order:
            col = Collector(port, cache) if mode == "with" else None
            probes = None
            if mode == "probes":
                probes = loader.load(loader.ProbeConfig(ports=(port,), header_cache=cache))
            try:
                res[mode] = run_saturated(port, args.seconds)
                if col:
                    time.sleep(1.0)  # drain
                    reported.append(col.requests_seen() / max(res[mode]["requests"], 1))
            finally:
                if col:
                    col.stop()
                if probes:
                    probes.close()
        r_without = res["without"]["requests"] / res["without"]["seconds"]
        r_with = res["with"]["requests"] / res["with"]["seconds"]
        ratios.append(r_with / r_without)
        probe_ratios.append(res["probes"]["requests"] / res["probes"]["seconds"] / r_without)
        base_rates.append(r_without)
        print(
            f"pair {i}: without {r_without:.0f} req/s, with {r_with:.0f} req/s, "
            f"ratio {r_with / r_without:.4f}",
            file=sys.stderr,
        )
    rows.append(
        ("requests/s without collector (median of pairs)", f"{statistics.median(base_rates):.0f}")
    )
    rows.append(
        (
            "throughput with / without (median of pairs)",
            f"{statistics.median(ratios):.4f} (loss {100 * (1 - statistics.median(ratios)):.2f} %)",
        )
    )
    rows.append(
        (
            "throughput with BPF probes only / without (median of pairs)",
            f"{statistics.median(probe_ratios):.4f} "
            f"(loss {100 * (1 - statistics.median(probe_ratios)):.2f} %)",
        )
    )

    rows.append(
        (
            "at saturation: share of requests the collector reported (median)",
            f"{100 * statistics.median(reported):.1f} % (the rest dropped in the kernel and "
            "counted)",
        )
    )

    # 2a + 3: fixed rates with bpf_stats; the 1k req/s latency also without the collector
    base_1k = run_client(port, args.seconds, rate=1000)
    col = Collector(port, cache)
    try:
        set_bpf_stats(True)
        for rate in (1000, 5000):
            t0, c0 = bpf_run_time_ns()
            cpu0 = col.cpu_s()
            seen0 = col.requests_seen()
            res1 = run_client(port, args.seconds, rate=rate)
            time.sleep(1.0)  # let the collector drain its ring buffer
            cpu1 = col.cpu_s()
            t1, c1 = bpf_run_time_ns()
            seen = col.requests_seen() - seen0
            achieved = res1["requests"] / res1["seconds"]
            wall = res1["seconds"] + 1.0
            rows.append((f"{rate} req/s target: achieved", f"{achieved:.0f} req/s"))
            if rate == 1000:
                rows.append(
                    (
                        "1000 req/s: client p50 latency without / with collector",
                        f"{base_1k['p50_us']:.1f} / {res1['p50_us']:.1f} us "
                        f"({res1['p50_us'] - base_1k['p50_us']:+.1f} us)",
                    )
                )
            rows.append(
                (
                    f"{rate} req/s: collector user-space CPU",
                    f"{100 * (cpu1 - cpu0) / wall:.2f} % of one core, "
                    f"{(cpu1 - cpu0) / max(res1['requests'], 1) * 1e6:.1f} us per request",
                )
            )
            rows.append(
                (
                    f"{rate} req/s: in-kernel BPF time",
                    f"{100 * (t1 - t0) / 1e9 / res1['seconds']:.2f} % of one core, "
                    f"{(t1 - t0) / max(res1['requests'], 1) / 1000:.2f} us per request, "
                    f"{(c1 - c0) / max(res1['requests'], 1):.1f} program runs per request",
                )
            )
            rows.append(
                (
                    f"{rate} req/s: requests reported by the collector",
                    f"{seen:.0f} of {res1['requests']}",
                )
            )
    finally:
        set_bpf_stats(False)

    # 4: RSS growth
    try:
        samples = []
        step = max(args.rss_requests // 10, 1)
        samples.append((0, col.rss_mib()))
        done = 0
        while done < args.rss_requests:
            r = run_client(port, 3600, max_requests=step, reconnect_every=100)
            done += int(r["requests"])
            time.sleep(0.5)
            samples.append((done, col.rss_mib()))
        first_half = [m for n, m in samples if n >= args.rss_requests // 2]
        slope = (samples[-1][1] - samples[len(samples) // 2][1]) / max(
            samples[-1][0] - samples[len(samples) // 2][0], 1
        )
        rows.append(("collector RSS after startup", f"{samples[0][1]:.1f} MiB"))
        rows.append(
            (
                f"collector RSS after {done} requests ({done // 100} connections)",
                f"{samples[-1][1]:.1f} MiB (max of second half {max(first_half):.1f})",
            )
        )
        rows.append(
            (
                "RSS at 1 M requests, extrapolated from the second-half slope",
                f"{samples[-1][1] + slope * (1_000_000 - done):.1f} MiB",
            )
        )
        print(
            "rss samples (requests, MiB): " + ", ".join(f"({n}, {m:.1f})" for n, m in samples),
            file=sys.stderr,
        )
    finally:
        col.stop()
        server.terminate()

    print("| measure | value |\n| --- | --- |")
    for k, v in rows:
        print(f"| {k} | {v} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
