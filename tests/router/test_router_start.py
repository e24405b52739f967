"""What a starting picker imports before its first pick (issue 27: 4.5 s to the first pick, all
Python imports). Asserted on sys.modules, never on a clock: a `kvspread router serve` process
of its own with a YAML config (as the Deployment runs it) answers one pick over the ext_proc
wire, then prints its sys.modules; the modules only some configurations use must be absent.
bench/router_start.py measures the time itself."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from router.config import GRPC_SERVERS
from tests.fake_kube import FakeKubeApi, make_node
from tests.ports import free_port, port_free_on, wait_http_ok
from tests.router.conftest import GROUP_VERSION, pool, ready_pod
from tests.router.fake_engine import FakeEngine
from tests.router.test_router_extproc import CHAT, destination, duplex

NEVER_BEFORE_USE = (
    "zmq",  # precise mode's KV events (cache.kv_events_port)
    "msgspec",
    "router.kvevents",
    "kubernetes",  # pool or selector mode
    "router.kubewatch",
    "numpy",  # the simulator
    "simulator",
    "ctypes.util",  # the body budget finds malloc_trim without it
)
"""Imported by no configuration here: static endpoints, no KV events."""

GRPCIO = ("grpc", "grpc_health.v1.health", "grpc_health.v1.health_pb2_grpc")
"""grpcio itself: only `--grpc-server grpcio` serves with it (health_pb2, a protobuf module,
is read by both servers)."""

# The child runs the command in its main thread (its signal handlers need it); a second
# thread prints sys.modules when a line arrives on stdin.
CHILD = """
import json, sys, threading
def dump():
    sys.stdin.readline()
    print(json.dumps(sorted(sys.modules)), flush=True)
threading.Thread(target=dump, daemon=True).start()
from kvspread.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _serve_and_list_modules(
    tmp_path: Path, config: dict[str, Any], kind: str, endpoint: str
) -> set[str]:
    """sys.modules of a `kvspread router serve` process after one real pick of `endpoint`."""
    grpc_port, http_port = free_port(), free_port()
    cfg = tmp_path / "router.yaml"
    cfg.write_text(yaml.safe_dump(config))
    args = ["router", "serve", "--config", str(cfg), "--grpc-server", kind, "--log-level",
            "warning", "--grpc-port", str(grpc_port), "--http-port", str(http_port)]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_http_ok(f"http://127.0.0.1:{http_port}/readyz", 60, proc)
        resps = duplex(grpc_port, CHAT)
        assert destination(resps[0])[0] == endpoint  # a real pick, then the modules
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
        loaded = set(json.loads(proc.stdout.readline()))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    return loaded


@pytest.mark.parametrize("kind", GRPC_SERVERS)
def test_serve_path_leaves_unused_modules_unimported(tmp_path: Path, engines, kind: str) -> None:  # type: ignore[no-untyped-def]
    (engine,) = engines("e")
    config = {"endpoints": {"static": [engine.address]}}
    loaded = _serve_and_list_modules(tmp_path, config, kind, engine.address)
    assert {"router.run", "router.extproc", "router.proto.ext_proc_pb2"} <= loaded
    assert loaded & set(NEVER_BEFORE_USE) == set()
    if kind == "h2":
        assert loaded & set(GRPCIO) == set()
    else:
        assert set(GRPCIO) <= loaded


def test_importing_the_serve_path_defers_the_scrape_client() -> None:
    """httpx (and through it rich and click, where installed) is imported by the scraper's
    first scrape, in its own thread, not on the way to the gRPC server's bind."""
    code = "import json, sys, router.cli, router.run; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    loaded = set(json.loads(out))
    assert {"router.run", "router.endpoints", "kvspread.engine"} <= loaded
    heavy = {"httpx", "httpcore", "rich", *GRPCIO, *NEVER_BEFORE_USE}
    assert loaded & heavy == set()


def test_pool_mode_watches_without_the_kubernetes_package(tmp_path: Path) -> None:
    """An InferencePool on the fake API server is listed and watched through
    kvspread/kubehttp.py (httpx): the `kubernetes` package, 0.44 s of CPU, stays unimported."""
    port = port_free_on(["127.0.0.2"])
    engine = FakeEngine("pod-0", host="127.0.0.2", port=port).start()
    try:
        with FakeKubeApi() as api:
            api.register_kind(GROUP_VERSION, "InferencePool", "inferencepools", True)
            api.put(make_node("gpu-1"))
            api.put(pool(port, {"app": "vllm"}))
            api.put(ready_pod("pod-0", "127.0.0.2", "gpu-1", {"app": "vllm"}))
            config = {
                "pool": {"name": "qwen-vl", "namespace": "llm"},
                "kubernetes": {"api_server": api.url},
            }
            loaded = _serve_and_list_modules(tmp_path, config, "h2", engine.address)
    finally:
        engine.stop()
    assert {"router.kubewatch", "kvspread.kubehttp", "kvspread.nodesignals"} <= loaded
    assert not {m for m in loaded if m == "kubernetes" or m.startswith("kubernetes.")}
