"""The router's gRPC servers against grpc-go, the gRPC stack of the kubelet's `grpc:` probes
(manifests/router/deployment.yaml uses them) and of the Gateway API Inference Extension's
tools: `kvspread router serve` as a subprocess, called by tools/grpc-go-probe (grpc-go
v1.64.1) as the kubelet calls it (Check under the probe's timeout), and with Health.Watch,
ext_proc Process streams (raw protobuf bytes, parsed here with router/proto's stubs), one
connection for many calls, the GOAWAY of a stopping router, and TLS.

The probe binary is built by tools/grpc-go-probe/build.sh into build/grpc-go-probe/, or
named by $KVSPREAD_GRPC_GO_PROBE; without it (no grpc-go sources, as in CI) these tests
skip."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
import yaml
from grpc_health.v1 import health_pb2

from router.config import GRPC_SERVERS
from router.extproc import BODY_CHUNK_BYTES, SERVICE_NAME
from router.h2grpc import H2GrpcServer, HealthStatus
from router.proto import ext_proc_pb2 as pb
from tests.ports import free_port, wait_http_ok
from tests.router.conftest import h2_serving, issue_tls, tool_binary
from tests.router.fake_engine import FakeEngine
from tests.router.test_router_extproc import (
    BUFFERED,
    CHAT,
    DUPLEX,
    body_msgs,
    destination,
    headers_msg,
)

ROOT = Path(__file__).resolve().parents[2]
BUILT = ROOT / "build" / "grpc-go-probe" / "grpc-go-probe"
DEPLOYMENT = ROOT / "manifests" / "router" / "deployment.yaml"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
DEADLINE_EXCEEDED, NOT_FOUND, RESOURCE_EXHAUSTED, UNIMPLEMENTED, UNAVAILABLE = 4, 5, 8, 12, 14
LIMIT = 4 << 20  # the routers' server.max_message_bytes here: the smallest allowed


def _probe_binary() -> Path:
    return tool_binary(
        "KVSPREAD_GRPC_GO_PROBE",
        BUILT,
        "run tools/grpc-go-probe/build.sh SRC (grpc-go v1.64.1 and its modules' sources; see the"
        " script)",
    )


@pytest.fixture(scope="module")
def probe_bin() -> Path:
    return _probe_binary()


def probe(
    binary: Path, mode: str, addr: str, *args: str, timeout: float = 30
) -> tuple[int, list[dict[str, Any]]]:
    """Run one probe mode; its exit status and the JSON objects it printed."""
    out = subprocess.run(
        [str(binary), mode, "-addr", addr, *args], capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode in (0, 1), out.stdout + out.stderr  # 2: bad usage, else a crash
    return out.returncode, [json.loads(line) for line in out.stdout.splitlines()]


def write_messages(path: Path, msgs: list[pb.ProcessingRequest]) -> str:
    path.write_text("".join(m.SerializeToString().hex() + "\n" for m in msgs))
    return str(path)


def responses(lines: list[dict[str, Any]]) -> list[pb.ProcessingResponse]:
    return [
        pb.ProcessingResponse.FromString(bytes.fromhex(x["message"]))
        for x in lines
        if "message" in x
    ]


def end_of(lines: list[dict[str, Any]]) -> dict[str, Any]:
    (end,) = [x["end"] for x in lines if "end" in x]
    return end  # type: ignore[no-any-return]


@dataclass
class Served:
    """A `kvspread router serve` subprocess and what the tests need to call it."""

    proc: subprocess.Popen[str]
    addr: str
    http: str
    kind: str
    idle: FakeEngine
    busy: FakeEngine


def serve(tmp: Path, kind: str, engines: list[FakeEngine], **server: Any) -> Served:
    grpc_port, http_port = free_port(), free_port()
    cfg = tmp / f"router-{kind}.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "server": {
                    "host": "127.0.0.1",
                    "grpc_port": grpc_port,
                    "http_port": http_port,
                    "grpc_server": kind,
                    "max_message_bytes": LIMIT,
                    "drain_timeout_s": 0.5,  # the Watch test's grace
                    **server,
                },
                "endpoints": {"static": [e.address for e in engines]},
                "metrics": {"interval_s": 0.2},
            }
        )
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvspread", "router", "serve", "--config", str(cfg)],
        env={**os.environ, "KVSPREAD_ROUTER_SERVER_LOG_LEVEL": "warning"},
        stderr=subprocess.PIPE,
        text=True,
    )
    http = f"http://127.0.0.1:{http_port}"
    try:
        wait_http_ok(f"{http}/readyz", 60, proc)
        deadline = time.monotonic() + 20
        while not all(v["fresh"] for v in httpx.get(f"{http}/debug/endpoints").json()):
            assert time.monotonic() < deadline, "the engines' metrics were never scraped"
            time.sleep(0.1)
    except BaseException:
        stop(proc)
        raise
    return Served(proc, f"127.0.0.1:{grpc_port}", http, kind, engines[1], engines[0])


def stop(proc: subprocess.Popen[str]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(30)
    finally:
        if proc.stderr is not None:
            proc.stderr.close()


@pytest.fixture(scope="module")
def fakes() -> Iterator[list[FakeEngine]]:
    busy, idle = FakeEngine("busy").start(), FakeEngine("idle").start()
    busy.set(waiting=12, running=20, kv=0.7)
    idle.set(waiting=0, running=1, kv=0.1)
    yield [busy, idle]
    busy.stop()
    idle.stop()


@pytest.fixture(scope="module", params=GRPC_SERVERS)
def router(request, probe_bin, fakes, tmp_path_factory) -> Iterator[Served]:  # type: ignore[no-untyped-def]
    """The router on each gRPC server (h2 and grpcio), its static endpoints the two fakes."""
    served = serve(tmp_path_factory.mktemp("grpc-go"), request.param, fakes)
    yield served
    assert stop(served.proc) == 0


def manifest_probe_services() -> list[str]:
    (doc,) = [d for d in yaml.safe_load_all(DEPLOYMENT.read_text()) if d["kind"] == "Deployment"]
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    return [container[p]["grpc"]["service"] for p in ("readinessProbe", "livenessProbe")]


# --- the kubelet's probe ------------------------------------------------------------------
def test_kubelet_probe_passes_for_every_served_health_service(router, probe_bin) -> None:  # type: ignore[no-untyped-def]
    services = manifest_probe_services()
    assert services == ["readiness", "liveness"]
    for service in ["", *services, SERVICE_NAME]:
        # 1 s: the probe's default timeoutSeconds, sent by grpc-go as grpc-timeout
        rc, (got,) = probe(probe_bin, "check", router.addr, "-service", service, "-timeout", "1s")
        assert rc == 0 and got["result"] == "success", got
        assert (got["code"], got["status"]) == (0, "SERVING")


def test_kubelet_probe_of_an_unknown_service_is_not_found(router, probe_bin) -> None:  # type: ignore[no-untyped-def]
    rc, (got,) = probe(probe_bin, "check", router.addr, "-service", "no-such-service")
    assert rc == 1 and got["result"] == "failure"
    assert got["code"] == NOT_FOUND, got
    if router.kind == "h2":  # grpcio's health servicer gives no message
        assert "no-such-service" in got["message"], got


# --- Watch, the deadline ------------------------------------------------------------------
def test_watch_sends_the_status_and_the_deadline_ends_it(router, probe_bin) -> None:  # type: ignore[no-untyped-def]
    # two updates asked, one due: the stream stays open until grpc-go's deadline ends it
    rc, lines = probe(
        probe_bin, "watch", router.addr, "-service", "readiness", "-n", "2", "-timeout", "1.5s"
    )
    assert rc == 1 and lines[0] == {"status": "SERVING"}
    assert end_of(lines)["code"] == DEADLINE_EXCEEDED and lines[-1]["updates"] == 1
    rc, lines = probe(
        probe_bin, "watch", router.addr, "-service", "later", "-n", "1", "-timeout", "5s"
    )
    assert rc == 0 and lines == [{"status": "SERVICE_UNKNOWN"}]
    # the cancelled Watch (grpc-go's RST_STREAM) left the server serving
    rc, (got,) = probe(probe_bin, "check", router.addr, "-service", "readiness")
    assert rc == 0, got


# --- ext_proc's Process stream ------------------------------------------------------------
def test_ext_proc_duplex_stream(router, probe_bin, tmp_path) -> None:  # type: ignore[no-untyped-def]
    body = json.dumps({"model": "q", "prompt": "x" * 100_000}).encode()
    msgs = write_messages(tmp_path / "m.hex", [headers_msg(DUPLEX), *body_msgs(body, 16384)])
    rc, lines = probe(probe_bin, "process", router.addr, "-messages", msgs, "-timeout", "10s")
    assert rc == 0 and end_of(lines)["code"] == 0, lines
    resps = responses(lines)
    assert [r.WhichOneof("response") for r in resps] == ["request_headers"] + ["request_body"] * (
        len(resps) - 1
    )
    header, metadata, clear = destination(resps[0])
    assert header == metadata == f"{router.idle.address},{router.busy.address}" and clear
    streamed = [r.request_body.response.body_mutation.streamed_response for r in resps[1:]]
    assert b"".join(s.body for s in streamed) == body
    assert len(streamed) == -(-len(body) // BODY_CHUNK_BYTES) and streamed[-1].end_of_stream


def test_ext_proc_buffered_stream_in_lockstep(router, probe_bin, tmp_path) -> None:  # type: ignore[no-untyped-def]
    msgs = write_messages(tmp_path / "m.hex", [headers_msg(BUFFERED), *body_msgs(CHAT, len(CHAT))])
    rc, lines = probe(
        probe_bin, "process", router.addr, "-messages", msgs, "-lockstep", "-timeout", "10s"
    )
    assert rc == 0 and end_of(lines)["code"] == 0, lines
    first, second = responses(lines)
    assert first.WhichOneof("response") == "request_headers"
    assert not first.request_headers.response.header_mutation.set_headers
    assert destination(second)[0].split(",")[0] == router.idle.address


def test_ext_proc_large_body_through_grpc_go_flow_control(router, probe_bin, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # 6 MB passed back in duplex mode: far past grpc-go's 64 KiB initial windows, so the
    # server's sends wait for grpc-go's WINDOW_UPDATEs
    body = json.dumps({"model": "q", "prompt": "y" * (6 << 20)}).encode()
    msgs = write_messages(tmp_path / "m.hex", [headers_msg(DUPLEX), *body_msgs(body, 1 << 16)])
    rc, lines = probe(
        probe_bin, "process", router.addr, "-messages", msgs, "-timeout", "60s", timeout=90
    )
    assert rc == 0 and end_of(lines)["code"] == 0, end_of(lines)
    streamed = [
        r.request_body.response.body_mutation.streamed_response for r in responses(lines)[1:]
    ]
    assert b"".join(s.body for s in streamed) == body


def test_a_message_over_the_limit_is_resource_exhausted(router, probe_bin, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # grpc-go sends it whole (its send limit is 2 GiB); the router ends the stream while
    # the message is still arriving, and grpc-go reports the status
    big = pb.ProcessingRequest(
        request_body=pb.HttpBody(body=b"z" * (LIMIT + 1), end_of_stream=True)
    )
    msgs = write_messages(tmp_path / "m.hex", [headers_msg(BUFFERED), big])
    rc, lines = probe(probe_bin, "process", router.addr, "-messages", msgs, "-timeout", "20s")
    assert rc == 1 and end_of(lines)["code"] == RESOURCE_EXHAUSTED, lines
    rc, (got,) = probe(probe_bin, "check", router.addr, "-service", "readiness")
    assert rc == 0, got


def test_an_unknown_method_is_unimplemented(router, probe_bin, tmp_path) -> None:  # type: ignore[no-untyped-def]
    msgs = write_messages(tmp_path / "m.hex", [headers_msg(DUPLEX)])
    method = "/envoy.service.ext_proc.v3.ExternalProcessor/Nope"
    rc, lines = probe(probe_bin, "process", router.addr, "-messages", msgs, "-method", method)
    assert rc == 1 and end_of(lines)["code"] == UNIMPLEMENTED, lines


# --- one connection, many calls -----------------------------------------------------------
def test_one_connection_serves_checks_and_streams(router, probe_bin, tmp_path) -> None:  # type: ignore[no-untyped-def]
    msgs = write_messages(tmp_path / "m.hex", [headers_msg(DUPLEX), *body_msgs(CHAT, 4096)])
    rc, lines = probe(
        probe_bin, "session", router.addr, "-services", ",readiness,liveness",
        "-messages", msgs, "-repeat", "4", "-timeout", "20s",
    )  # fmt: skip
    assert rc == 0, lines
    checks = [x for x in lines if "service" in x]
    assert len(checks) == 12 and all(x["status"] == "SERVING" for x in checks)
    ends = [x["end"] for x in lines if "end" in x]
    assert len(ends) == 4 and all(e["code"] == 0 for e in ends)
    assert all(destination(r)[0].startswith(router.idle.address) for r in responses(lines)[::2])
    assert lines[-1] == {"dials": 1, "state": "READY"}


# --- the router stopping ------------------------------------------------------------------
def test_a_stopping_router_sends_goaway_and_the_probe_fails_fast(
    probe_bin, fakes, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    served = serve(tmp_path, "h2", fakes)
    try:
        watch = subprocess.Popen(
            [str(probe_bin), "watch", "-addr", served.addr, "-service", "readiness", "-n", "5",
             "-timeout", "30s"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert watch.stdout is not None
        assert json.loads(watch.stdout.readline()) == {"status": "SERVING"}
    finally:
        assert stop(served.proc) == 0
    rest, _ = watch.communicate(timeout=30)
    assert watch.returncode == 1
    end = json.loads(rest.splitlines()[-1])["end"]
    # grpc-go read the GOAWAY (its debug data) before the connection closed
    assert end["code"] == UNAVAILABLE and "server stopping" in end["message"], end
    rc, (got,) = probe(probe_bin, "check", served.addr, "-service", "readiness", "-timeout", "1s")
    assert rc == 1 and got["result"] == "failure" and "failed to connect" in got["output"]


# --- TLS ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", GRPC_SERVERS)
def test_tls(probe_bin, fakes, tmp_path, kind) -> None:  # type: ignore[no-untyped-def]
    ca = issue_tls(tmp_path)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    served = serve(
        tmp_path,
        kind,
        fakes,
        tls_cert=str(tmp_path / "cert.pem"),
        tls_key=str(tmp_path / "key.pem"),
    )
    try:
        tls = ["-ca", str(tmp_path / "ca.pem")]
        for name in ("", "localhost"):  # the address's IP SAN, then a DNS SAN
            args = [*tls, "-server-name", name] if name else tls
            rc, (got,) = probe(probe_bin, "check", served.addr, "-service", "readiness", *args)
            assert rc == 0 and got["status"] == "SERVING", got
            # ALPN h2, which grpc-go 1.67 and later require of a TLS server
            assert got["alpn"] == "h2" and got["tls_version"] in ("TLS 1.2", "TLS 1.3"), got
        msgs = write_messages(tmp_path / "m.hex", [headers_msg(DUPLEX), *body_msgs(CHAT, 4096)])
        rc, lines = probe(
            probe_bin, "process", served.addr, "-messages", msgs, *tls, "-timeout", "10s"
        )
        assert rc == 0 and destination(responses(lines)[0])[0].startswith(served.idle.address)
        # the kubelet's gRPC probe is plaintext only: against a TLS port it fails
        rc, (got,) = probe(
            probe_bin, "check", served.addr, "-service", "readiness", "-timeout", "2s"
        )
        assert rc == 1 and got["result"] == "failure", got
        # and a CA that did not sign the certificate is refused
        other = trustme.CA()
        other.cert_pem.write_to_path(str(tmp_path / "other.pem"))
        rc, (got,) = probe(
            probe_bin, "check", served.addr, "-ca", str(tmp_path / "other.pem"), "-timeout", "2s"
        )
        assert rc == 1 and got["result"] == "failure", got
    finally:
        assert stop(served.proc) == 0


# --- Watch following changes (the server in-process, its health set by the test) ----------
@pytest.fixture
def h2_server() -> Iterator[tuple[H2GrpcServer, HealthStatus, asyncio.AbstractEventLoop]]:
    health = HealthStatus()
    health.set("readiness", SERVING)
    with h2_serving({}, health) as (srv, loop):
        yield srv, health, loop


def test_watch_follows_status_changes(h2_server, probe_bin) -> None:  # type: ignore[no-untyped-def]
    srv, health, loop = h2_server
    watch = subprocess.Popen(
        [str(probe_bin), "watch", "-addr", f"127.0.0.1:{srv.port}", "-service", "readiness", "-n", "3",
         "-timeout", "20s"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert watch.stdout is not None
    try:
        assert json.loads(watch.stdout.readline()) == {"status": "SERVING"}
        loop.call_soon_threadsafe(health.set, "readiness", NOT_SERVING)
        assert json.loads(watch.stdout.readline()) == {"status": "NOT_SERVING"}
        loop.call_soon_threadsafe(health.set, "readiness", SERVING)
        assert json.loads(watch.stdout.readline()) == {"status": "SERVING"}
        assert watch.wait(10) == 0
    finally:
        if watch.poll() is None:
            watch.kill()
        watch.stdout.close()


def test_kubelet_probe_fails_on_not_serving_and_leaves_no_connection(h2_server, probe_bin) -> None:  # type: ignore[no-untyped-def]
    srv, health, loop = h2_server
    addr = f"127.0.0.1:{srv.port}"
    loop.call_soon_threadsafe(health.set, "readiness", NOT_SERVING)
    for _ in range(5):  # a probe every period: each one its own connection, closed after
        rc, (got,) = probe(probe_bin, "check", addr, "-service", "readiness")
        assert rc == 1 and got["status"] == "NOT_SERVING", got
        assert got["output"] == 'service unhealthy (responded with "NOT_SERVING")'
    deadline = time.monotonic() + 10
    while srv._connections:  # the server let every closed probe connection go
        assert time.monotonic() < deadline, f"{len(srv._connections)} connections kept"
        time.sleep(0.05)


class Pair:
    """A stream handler answering each message with itself, done after the second: the
    shape of a BUFFERED ext_proc stream (headers, then the body)."""

    def __init__(self) -> None:
        self.seen = 0

    def on_message(self, data: bytes) -> list[bytes]:
        self.seen += 1
        return [data]

    @property
    def finished(self) -> bool:
        return self.seen >= 2


def test_a_stream_in_flight_finishes_while_the_server_drains(probe_bin, tmp_path) -> None:  # type: ignore[no-untyped-def]
    msgs = tmp_path / "m.hex"
    msgs.write_text(b"one".hex() + "\n" + b"two".hex() + "\n")
    with h2_serving({"/t.Pair/Stream": Pair}, HealthStatus()) as (srv, loop):
        call = subprocess.Popen(
            [str(probe_bin), "process", "-addr", f"127.0.0.1:{srv.port}", "-method",
             "/t.Pair/Stream", "-messages", str(msgs), "-lockstep", "-step", "-timeout", "30s"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert call.stdin is not None and call.stdout is not None
        assert json.loads(call.stdout.readline()) == {"message": b"one".hex()}
        stopping = asyncio.run_coroutine_threadsafe(srv.stop(grace=30), loop)
        deadline = time.monotonic() + 10
        while not all(c.draining for c in srv._connections):  # GOAWAY on its way
            assert time.monotonic() < deadline
            time.sleep(0.01)
        call.stdin.write("\n")  # now the stream's second message
        call.stdin.close()
        rest = call.stdout.read()
        call.stdout.close()
        call.wait(30)
        stopping.result(10)  # the connection closed after its last stream, not at the grace
    lines = [json.loads(line) for line in rest.splitlines()]
    assert call.returncode == 0, lines
    assert lines[0] == {"message": b"two".hex()} and end_of(lines)["code"] == 0
