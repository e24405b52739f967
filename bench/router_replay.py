"""The picker's own cost per ext_proc stream, without the machine's other load in it.

First, record: a real Envoy (the bench's ext_proc bootstrap) sends `--streams` requests
through a small TCP tap in front of a picker, and the tap keeps every byte Envoy sent to
the picker. Then, replay: those bytes go into a fresh connection of the picker's own
HTTP/2 server (router/h2grpc.py `_Connection`, the real `ExtProcStream` handler and a
real `Router` picker over three fake engines), in this process, one frame per read (the
worst case) and all at once. Nothing else shares that work, so the CPU per stream is
steadier than the live bench's per-process figure. For a figure the load cannot move at
all, record once and count instructions of replays (each replay runs both ways):

    python3 bench/router_replay.py --save /tmp/envoy-to-picker.bin
    valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
        python3 bench/router_replay.py --load /tmp/envoy-to-picker.bin --replays 3
    # and with --replays 0; (I refs difference) / (2 * 3 * streams) = instructions per stream
    # PYTHONPATH=OTHER_CHECKOUT ... replays that checkout's router/ (the comparison before)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# after PYTHONPATH's folders, so `PYTHONPATH=OTHER_CHECKOUT` replays that checkout's router/
_pp = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
sys.path.insert(1 + len(_pp), str(ROOT))

# router/ first: bench.router_bench puts this checkout first on sys.path when imported
from router.extproc import PROCESS_PATH, ExtProcStream  # noqa: E402, I001
from router.h2grpc import H2GrpcServer, HealthStatus, _Connection  # noqa: E402
from router.run import Router  # noqa: E402
from bench.router_bench import OpenLoop, picker_command  # noqa: E402
from tests.ports import free_port, wait_http_ok  # noqa: E402
from tests.router.conftest import router_config  # noqa: E402
from tests.router.envoy_harness import Envoy, bootstrap, envoy_skip_reason  # noqa: E402
from tests.router.fake_engine import FakeEngine  # noqa: E402


async def record(streams: int, endpoints: list[str], picker_port: int) -> bytes:
    """Bytes a real Envoy sends to the picker for `streams` requests."""
    loop = asyncio.get_running_loop()
    captured = bytearray()

    async def tap(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        ur, uw = await asyncio.open_connection("127.0.0.1", picker_port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, keep: bool) -> None:
            while data := await src.read(65536):
                if keep:
                    captured.extend(data)
                dst.write(data)

        try:
            await asyncio.gather(pipe(r, uw, True), pipe(ur, w, False), return_exceptions=True)
        except asyncio.CancelledError:
            pass  # the recording is over; the tap goes with the event loop
        finally:
            w.close()
            uw.close()

    server = await asyncio.start_server(tap, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    envoy = await loop.run_in_executor(None, lambda: Envoy(bootstrap(port, endpoints)))
    try:
        load = OpenLoop(envoy.port, loop)
        lat, _ = await load.run(100, streams / 100)
        load.close()
        if None in lat:
            raise RuntimeError(f"{lat.count(None)} requests failed while recording")
    finally:
        await loop.run_in_executor(None, envoy.stop)
        server.close()
    return bytes(captured)


def frames(data: bytes) -> list[bytes]:
    """The connection preface with the first frame, then one frame per element."""
    out, pos = [], 24
    while pos + 9 <= len(data):
        end = pos + 9 + int.from_bytes(data[pos : pos + 3], "big")
        out.append(data[pos:end])
        pos = end
    return [data[:24] + out[0]] + out[1:]


class _Sink(asyncio.Transport):
    """Where the replayed connection's answers go (counted, not kept)."""

    def __init__(self) -> None:
        super().__init__()
        self.written = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += len(data)

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False


def replay(server: H2GrpcServer, reads: list[bytes]) -> int:
    conn = _Connection(server)
    sink = _Sink()
    conn.connection_made(sink)
    for chunk in reads:
        conn.data_received(chunk)
    return sink.written


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--streams", type=int, default=300, help="requests to record")
    ap.add_argument("--replays", type=int, default=15, help="replays of the recording")
    ap.add_argument("--save", metavar="FILE", help="also write the recording to FILE")
    ap.add_argument("--load", metavar="FILE", help="replay FILE instead of recording (no Envoy)")
    args = ap.parse_args()
    if not args.load and (why := envoy_skip_reason()):
        print(f"router_replay: {why}", file=sys.stderr)
        return 2
    if args.load and not Path(args.load).is_file():
        print(f"router_replay: --load {args.load}: no such file", file=sys.stderr)
        return 2
    engines = [FakeEngine(f"fake-{i}").start() for i in range(3)]
    endpoints = [f"127.0.0.1:{e.port}" for e in engines]
    # scrapes rare and metrics never stale, so the replay is the only work in this process
    metrics = {"interval_s": 30.0, "stale_after_s": 3600.0, "timeout_s": 2.0}
    router = Router(router_config(endpoints, metrics=metrics)).start()
    grpc_port, http_port = free_port(), free_port()
    picker = (
        None
        if args.load
        else subprocess.Popen(
            picker_command(endpoints, grpc_port, http_port, "h2"),
            cwd=ROOT,
        )
    )
    try:
        if picker is None:
            data = Path(args.load).read_bytes()
        else:
            wait_http_ok(f"http://127.0.0.1:{http_port}/readyz", 30, picker)
            data = asyncio.run(record(args.streams, endpoints, grpc_port))
            if args.save:
                Path(args.save).write_bytes(data)
        while len(router.endpoints.views()) < 3 or not all(
            v.fresh for v in router.endpoints.views()
        ):
            time.sleep(0.05)
        server = H2GrpcServer({PROCESS_PATH: lambda: ExtProcStream(router.picker)}, HealthStatus())
        reads = frames(data)
        streams = sum(1 for f in reads if f[3] == 1)  # HEADERS frames open the streams
        replay(server, reads)  # warm-up
        print(
            f"router/ replayed from {Path(sys.modules[_Connection.__module__].__file__ or '').parent}"
        )
        for name, chunks in (("one frame per read", reads), ("all at once", [data])):
            cpu = []
            for _ in range(args.replays):
                t = time.process_time()
                replay(server, chunks)
                cpu.append(time.process_time() - t)
            cpu.sort()
            if cpu:
                print(
                    f"{name}: {streams} streams, CPU per stream min "
                    f"{cpu[0] / streams * 1e6:.1f} us, median "
                    f"{cpu[len(cpu) // 2] / streams * 1e6:.1f} us over {len(cpu)} replays"
                )
        return 0
    finally:
        if picker is not None:
            picker.terminate()
            picker.wait(10)
        router.stop()
        for e in engines:
            e.stop()


if __name__ == "__main__":
    sys.exit(main())
