"""Start-up time of the endpoint picker: process start to its first successful pick.

Why: a restarted picker routes nothing until it answers, and with FailClose (GIE's default)
every request waits or fails meanwhile; issue 27 measured 4.5 s to the first pick, all of it
Python imports.

What runs: one fake vLLM engine (tests/router/fake_engine.py) in this process, then per
`--grpc-servers` kind and repeat a fresh `kvspread router serve --config router.yaml
--grpc-server KIND` (a new interpreter each time, as a restarted pod; the YAML names the
engine as a static endpoint). From just before the
fork, this process tries every `--poll` seconds to connect to the gRPC port; once it accepts,
it sends Envoy's FULL_DUPLEX_STREAMED messages of one chat request over the real ext_proc wire
(grpcio's client, a new channel per try, so no reconnect backoff stands between tries) until
an answer names a destination (x-gateway-destination-endpoint). Printed per kind: median and
p90 of `listen` (the gRPC port accepts), `pick` (the first answer with a destination) and
`ready` (the pick's process's /readyz first 200, polled after the pick; an upper bound) and
`cpu@pick`, the CPU seconds the picker had used when it answered (all threads, from
/proc/PID/stat in 10 ms ticks): on a machine shared with other load the wall-clock figures
move with it, the CPU figure much less.
The client side (grpcio, the protobuf module) is imported before the first run, so only
the picker's own start is counted.

    python bench/router_start.py                         # both servers, 7 starts each
    python bench/router_start.py --grpc-servers h2 --repeat 15
    python bench/router_start.py --endpoints pool        # an InferencePool, fake kube-apiserver

Target (issue 27 point 6): pick under 1.5 s.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import grpc
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from router.extproc import SERVICE  # noqa: E402
from tests.fake_kube import FakeKubeApi, make_node  # noqa: E402
from tests.ports import free_port, port_free_on  # noqa: E402
from tests.router.conftest import GROUP_VERSION, pool, ready_pod  # noqa: E402
from tests.router.fake_engine import FakeEngine  # noqa: E402
from tests.router.test_router_extproc import CHAT, DUPLEX, body_msgs, headers_msg  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
START_TIMEOUT_S = 60.0
"""A start slower than this is a failure, not a figure."""


def picker_command(config: Path, grpc_port: int, http_port: int, kind: str) -> list[str]:
    """`kvspread router serve` as the Deployment runs it: a YAML config (the ConfigMap's
    role; static endpoints here), ports and the server kind as flags."""
    return [
        sys.executable, "-m", "kvspread", "router", "serve", "--config", str(config),
        "--grpc-port", str(grpc_port), "--http-port", str(http_port), "--grpc-server", kind,
        "--log-level", "warning",
    ]  # fmt: skip


def write_config(path: Path, endpoint: str, api_server: str | None = None) -> Path:
    """Static endpoints, or (api_server given) the InferencePool llm/qwen-vl watched there."""
    if api_server is None:
        where = f"endpoints:\n  static: [{endpoint!r}]\n"
    else:
        where = (
            f"pool: {{name: qwen-vl, namespace: llm}}\nkubernetes: {{api_server: {api_server}}}\n"
        )
    path.write_text(where + "scoring:\n  fallbacks: 0\n")
    return path


def fake_cluster(stack: ExitStack) -> tuple[str, str]:
    """A fake kube-apiserver (tests/fake_kube.py) holding an InferencePool and one Ready pod
    whose engine runs on 127.0.0.2; (its URL, the pod's endpoint address)."""
    port = port_free_on(["127.0.0.2"])
    engine = FakeEngine("pod-0", host="127.0.0.2", port=port).start()
    stack.callback(engine.stop)
    api = stack.enter_context(FakeKubeApi())
    api.register_kind(GROUP_VERSION, "InferencePool", "inferencepools", True)
    api.put(make_node("gpu-1"))
    api.put(pool(port, {"app": "vllm"}))
    api.put(ready_pod("pod-0", "127.0.0.2", "gpu-1", {"app": "vllm"}))
    return api.url, engine.address


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _picks(port: int, endpoint: str) -> bool:
    """One ext_proc exchange; True when the answer sends the request to `endpoint`."""
    msgs = [headers_msg(DUPLEX), *body_msgs(CHAT, 16384)]
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            out = list(SERVICE.stub(ch).Process(iter(msgs), timeout=5))
    except grpc.RpcError:
        return False
    for resp in out:
        kind = resp.WhichOneof("response")
        if kind in ("request_headers", "request_body"):
            common = getattr(resp, kind).response
            for h in common.header_mutation.set_headers:
                if h.header.key == "x-gateway-destination-endpoint":
                    return bool(h.header.raw_value.decode() == endpoint)
    return False


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def one_start(
    config: Path, endpoint: str, kind: str, poll: float
) -> tuple[float, float, float, float]:
    """(listen, pick, ready, CPU at the pick) seconds after the fork of one fresh picker."""
    grpc_port, http_port = free_port(), free_port()
    t0 = time.monotonic()
    proc = subprocess.Popen(
        picker_command(config, grpc_port, http_port, kind),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = t0 + START_TIMEOUT_S
        listen = pick = None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"the picker exited with {proc.returncode}: {err[-2000:]}")
            if listen is None and _accepts(grpc_port):
                listen = time.monotonic() - t0
            if listen is not None and _picks(grpc_port, endpoint):
                pick = time.monotonic() - t0
                cpu = cpu_seconds(proc.pid)
                break
            time.sleep(poll)
        if listen is None or pick is None:
            raise RuntimeError(f"no pick within {START_TIMEOUT_S} s")
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{http_port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(poll)
        return listen, pick, time.monotonic() - t0, cpu
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _p(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grpc-servers", default="h2,grpcio", help="kinds, comma-separated")
    ap.add_argument("--repeat", type=int, default=7, help="starts per kind (default 7)")
    ap.add_argument("--poll", type=float, default=0.005, help="seconds between tries")
    ap.add_argument(
        "--endpoints",
        choices=("static", "pool"),
        default="static",
        help="static endpoints in the YAML (default), or an InferencePool on a fake "
        "kube-apiserver (the picker imports the Kubernetes client and lists the pool first)",
    )
    args = ap.parse_args()
    kinds = [k for k in args.grpc_servers.split(",") if k]
    if args.repeat < 1 or not kinds or set(kinds) - {"h2", "grpcio"}:
        ap.error("--repeat >= 1 and --grpc-servers from h2,grpcio")
    with ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="router-start-"))
        if args.endpoints == "pool":
            api_server, address = fake_cluster(stack)
        else:
            engine = FakeEngine("e0").start()
            stack.callback(engine.stop)
            api_server, address = None, engine.address
        config = write_config(Path(tmp) / "router.yaml", address, api_server)
        print(
            f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.endpoints} "
            f"endpoints, {args.repeat} starts per kind, seconds from fork (median / p90 / max)"
        )
        print(f"{'server':8} {'listen':>22} {'pick':>22} {'ready':>22} {'cpu@pick':>22}")
        for kind in kinds:
            runs = [one_start(config, address, kind, args.poll) for _ in range(args.repeat)]
            cols = []
            for i in range(4):
                xs = [r[i] for r in runs]
                cols.append(f"{statistics.median(xs):6.3f} /{_p(xs, 0.9):6.3f} /{max(xs):6.3f}")
            print(f"{kind:8} " + " ".join(f"{c:>22}" for c in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
