"""Fixtures of the router tests: fake engines and an in-process picker on free ports."""

from __future__ import annotations

import asyncio
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from router.config import RouterConfig
from router.h2grpc import H2GrpcServer, HealthStatus, StreamFactory
from router.run import Router
from tests.fake_kube import make_pod
from tests.ports import free_port, wait_http_ok
from tests.router.fake_engine import FakeEngine


@pytest.fixture
def engines() -> Iterator[Callable[..., list[FakeEngine]]]:
    started: list[FakeEngine] = []

    def make(*names: str) -> list[FakeEngine]:
        out = [FakeEngine(n).start() for n in names]
        started.extend(out)
        return out

    yield make
    for e in started:
        e.stop()


def router_config(static: list[str] | None = None, **sections: Any) -> RouterConfig:
    doc: dict[str, Any] = {
        "server": {"grpc_port": 0, "http_port": 0, "drain_timeout_s": 1.0},
        "metrics": {"interval_s": 0.1, "stale_after_s": 1.0, "timeout_s": 0.5},
    }
    if static is not None:
        doc["endpoints"] = {"static": static}
    for key, value in sections.items():
        doc.setdefault(key, {}).update(value)
    return RouterConfig.from_mapping(doc)


def wait(pred: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll `pred` until it holds; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def wait_fresh(router: Router, n: int, timeout: float = 10.0) -> None:
    """Until n endpoints have fresh metrics from a scrape that started after now."""
    deadline = time.monotonic() + timeout
    first = router.endpoints.scrapes
    while time.monotonic() < deadline:
        views = router.endpoints.views()
        if (
            router.endpoints.scrapes >= first + n
            and len(views) == n
            and all(v.fresh for v in views)
        ):
            return
        time.sleep(0.05)
    raise AssertionError(f"endpoints not fresh: {router.endpoints.views()}")


def tool_binary(env: str, built: Path, how: str) -> Path:
    """A test tool's binary: the one $env names, else `built`; skips (saying `how` to build
    it) when neither exists."""
    named = os.environ.get(env)
    if named:
        if not os.access(named, os.X_OK):
            pytest.fail(f"{env}={named}: not an executable file")
        return Path(named)
    if built.exists():
        return built
    pytest.skip(f"{built.name} is not built: {how} or set {env}")


@contextmanager
def h2_serving(
    methods: dict[str, StreamFactory],
    health: HealthStatus,
    tls: ssl.SSLContext | None = None,
    **kw: Any,
) -> Iterator[tuple[H2GrpcServer, asyncio.AbstractEventLoop]]:
    """An H2GrpcServer on 127.0.0.1 (a free port) on its own event loop in a thread."""
    loop = asyncio.new_event_loop()
    srv = H2GrpcServer(methods, health, **kw)
    loop.run_until_complete(srv.start("127.0.0.1", 0, tls))
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    try:
        yield srv, loop
    finally:
        asyncio.run_coroutine_threadsafe(srv.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)
        loop.close()


def issue_tls(tmp_path: Path) -> Any:
    """A test CA (trustme) and a serving certificate of it for 127.0.0.1 and localhost,
    written as tmp_path/cert.pem and key.pem; returns the CA."""
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    return ca


@pytest.fixture
def start_router() -> Iterator[Callable[[RouterConfig], Router]]:
    running: list[Router] = []

    def start(cfg: RouterConfig) -> Router:
        r = Router(cfg).start()
        running.append(r)
        return r

    yield start
    for r in running:
        r.stop()


@pytest.fixture
def saturated(engines, start_router):  # type: ignore[no-untyped-def]
    """Two engines each with more requests waiting than scoring.saturation_queue (8), behind
    a picker whose objectives are batch (-1, sheddable) and premium (10)."""
    a, b = engines("a", "b")
    a.set(waiting=20)
    b.set(waiting=30)
    router = start_router(
        router_config([a.address, b.address], objectives={"classes": {"batch": -1, "premium": 10}})
    )
    wait_fresh(router, 2)
    return router


# --- cluster helpers: pods of an InferencePool on 127.0.0.N sharing one port ------------
GROUP_VERSION = "inference.networking.k8s.io/v1"


def ready_pod(name: str, ip: str, node: str, labels: dict[str, str], ready: bool = True) -> dict:
    pod = make_pod(name, "llm", node_name=node, labels=labels)
    pod["status"] = {
        "phase": "Running",
        "podIP": ip,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    return pod


def pool(port: int, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "InferencePool",
        "metadata": {"name": "qwen-vl", "namespace": "llm"},
        "spec": {
            "selector": {"matchLabels": selector},
            "targetPorts": [{"number": port}],
            "endpointPickerRef": {"name": "kvspread-router", "port": {"number": 9002}},
        },
    }


@contextmanager
def picker_subprocess(
    tmp_path: Path, static: list[str], **server: Any
) -> Iterator[tuple[subprocess.Popen[bytes], int, str]]:
    """`kvspread router serve` as a process of its own (its RSS, its signals): static
    endpoints, free ports; yields (process, gRPC port, HTTP base URL) once /readyz is 200;
    SIGTERM and wait at the end."""
    grpc_port, http_port = free_port(), free_port()
    cfg = tmp_path / "router.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "server": {"grpc_port": grpc_port, "http_port": http_port, **server},
                "endpoints": {"static": static},
                "scoring": {"fallbacks": 0},
            }
        )
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvspread", "router", "serve", "--config", str(cfg)],
        env={**os.environ, "KVSPREAD_ROUTER_SERVER_LOG_LEVEL": "warning"},
    )
    http = f"http://127.0.0.1:{http_port}"
    try:
        wait_http_ok(f"{http}/readyz", 60, proc)
        yield proc, grpc_port, http
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(60)
