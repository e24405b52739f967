"""Request body budgets (router/bodybudget.py, `server.max_body_bytes` and
`server.max_bodies_bytes`): over the request's budget 413 with an OpenAI-style error, over the
total one 429, and the bytes given back after the choice, a refusal or a reset; on both gRPC
servers with grpcio's client replaying Envoy's messages, and behind a real Envoy (duplex mode)
with a 300 MiB upload to a `kvspread router serve` subprocess whose peak RSS is read from
/proc (Linux's VmHWM)."""

from __future__ import annotations

import json
import queue
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from router.bodybudget import DEFAULT_MAX_BODY_BYTES
from router.config import GRPC_SERVERS
from router.extproc import SERVICE
from router.proto import ext_proc_pb2 as pb
from router.run import GRPCIO_MAX_RECEIVE_BYTES, grpcio_receive_limit
from tests.router.conftest import picker_subprocess, router_config, wait, wait_fresh
from tests.router.envoy_harness import Envoy, bootstrap, envoy_skip_reason
from tests.router.fake_engine import FakeEngine
from tests.router.test_router_extproc import CHAT, DUPLEX, body_msgs, channel, headers_msg

MIB = 1 << 20


@pytest.fixture(params=GRPC_SERVERS)
def small(request, engines, start_router):  # type: ignore[no-untyped-def]
    """The picker with a 1 MiB request budget and a 2 MiB total, on each gRPC server."""
    (idle,) = engines("idle")
    router = start_router(
        router_config(
            [idle.address],
            server={
                "grpc_server": request.param,
                "max_body_bytes": MIB,
                "max_bodies_bytes": 2 * MIB,
            },
        )
    )
    wait_fresh(router, 1)
    return router


def _refusal(resp: pb.ProcessingResponse) -> tuple[int, dict[str, object]]:
    imm = resp.immediate_response
    return imm.status.code, json.loads(imm.body)["error"]


def test_a_body_over_the_request_budget_gets_413_and_is_given_back(small) -> None:  # type: ignore[no-untyped-def]
    body = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"x" * (2 * MIB) + b'"}]}'
    with channel(small.grpc_port) as ch:
        out = list(
            SERVICE.stub(ch).Process(
                iter([headers_msg(DUPLEX), *body_msgs(body, 65536)]), timeout=10
            )
        )
    (resp,) = out
    code, error = _refusal(resp)
    assert code == 413
    assert error["type"] == "request_too_large" and error["code"] == 413
    assert "server.max_body_bytes" in str(error["message"])
    assert small.bodies.held == 0 and small.bodies.refused_too_large == 1
    text = _metrics(small)
    assert 'kvspread_router_body_refusals_total{code="413"} 1.0' in text
    assert 'kvspread_router_body_refusals_total{code="429"} 0.0' in text
    assert "kvspread_router_body_held_bytes 0.0" in text


def _metrics(router) -> str:  # type: ignore[no-untyped-def]
    return httpx.get(f"http://127.0.0.1:{router.http_port}/metrics").text


def _held(text: str) -> float:
    """kvspread_router_body_held_bytes as a scraper reads it."""
    for fam in text_string_to_metric_families(text):
        if fam.name == "kvspread_router_body_held_bytes":
            return float(fam.samples[0].value)
    raise AssertionError("kvspread_router_body_held_bytes not served")


def _open_upload(stub, size: int):  # type: ignore[no-untyped-def]
    """A duplex Process call that sent its headers and `size` body bytes and waits: the
    queue takes the next messages (None ends the client's half)."""
    q: queue.Queue[pb.ProcessingRequest | None] = queue.Queue()
    q.put(headers_msg(DUPLEX))
    q.put(pb.ProcessingRequest(request_body=pb.HttpBody(body=b"x" * size)))

    def gen() -> Iterator[pb.ProcessingRequest]:
        while (m := q.get()) is not None:
            yield m

    return q, stub.Process(gen(), timeout=20)


def test_bodies_over_the_total_budget_get_429_until_one_is_done(small) -> None:  # type: ignore[no-untyped-def]
    part = 900 << 10
    with channel(small.grpc_port) as ch:
        stub = SERVICE.stub(ch)
        (q0, call0), (q1, call1) = _open_upload(stub, part), _open_upload(stub, part)
        wait(lambda: small.bodies.held == 2 * part)  # 1.8 of the 2 MiB
        msgs = [headers_msg(DUPLEX), *body_msgs(CHAT + b" " * (400 << 10), 65536)]
        (third,) = list(stub.Process(iter(msgs), timeout=10))
        code, error = _refusal(third)
        assert code == 429 and error["type"] == "bodies_over_budget"
        assert small.bodies.refused_busy == 1
        text = _metrics(small)
        assert 'kvspread_router_body_refusals_total{code="429"} 1.0' in text
        assert _held(text) == 2 * part
        # a client going away gives its bytes back; the next body fits again
        call0.cancel()
        wait(lambda: small.bodies.held == part)
        fourth = list(
            stub.Process(iter([headers_msg(DUPLEX), *body_msgs(CHAT, 65536)]), timeout=10)
        )
        assert fourth[0].WhichOneof("response") == "request_headers"
        assert small.bodies.held == part
        q1.put(pb.ProcessingRequest(request_body=pb.HttpBody(end_of_stream=True)))
        q1.put(None)
        list(call1)  # the picker reads the (unparsable) body and answers 400
        wait(lambda: small.bodies.held == 0)
        q0.put(None)


# --- behind Envoy: a 300 MiB upload and the picker's RSS ------------------------------
_SKIP = envoy_skip_reason()


def _rss(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process, bytes: its resident memory now and at its peak."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024
    return fields["VmRSS"], fields["VmHWM"]


def _reset_peak(pid: int) -> None:
    """Start VmHWM again from VmRSS (Linux's clear_refs 5); where that is refused, the peak
    stays the one since the start, which only makes the bound stricter."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        pass


LISTENER_BUFFER = {"h2": 32 * MIB, "grpcio": 8 * MIB}
"""Envoy's listener per_connection_buffer_limit_bytes, which bounds the ext_proc messages a
duplex upload is coalesced into: the `grpcio` server's bound holds up to 8 MiB (router/run.py's
GRPCIO_MAX_RECEIVE_BYTES), the `h2` one's with any (32 MiB here, messages of up to 33 MiB)."""


@pytest.fixture(params=GRPC_SERVERS)
def picker_process(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], int, FakeEngine, str]]:
    engine = FakeEngine("e0").start()
    kind = request.param
    try:
        with picker_subprocess(tmp_path, [engine.address], grpc_server=kind) as (proc, port, _):
            yield proc, port, engine, kind
    finally:
        engine.stop()


@pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
@pytest.mark.slow
def test_a_300_mib_upload_through_envoy_stays_within_the_budget(picker_process) -> None:  # type: ignore[no-untyped-def]
    proc, grpc_port, engine, kind = picker_process
    envoy = Envoy(
        bootstrap(grpc_port, [engine.address], listener_buffer_bytes=LISTENER_BUFFER[kind])
    )
    try:
        ok = httpx.post(envoy.url + "/v1/chat/completions", content=CHAT, timeout=30)
        assert ok.status_code == 200
        before, _ = _rss(proc.pid)
        _reset_peak(proc.pid)  # the peak from here on: the upload's, not the start's
        chunk = b"x" * MIB

        def upload() -> Iterator[bytes]:
            yield b'{"model": "m", "messages": [{"role": "user", "content": "'
            for _ in range(300):
                yield chunk

        try:
            resp = httpx.post(
                envoy.url + "/v1/chat/completions",
                content=upload(),
                headers={"content-type": "application/json"},
                timeout=120,
            )
            status = resp.status_code
            error = resp.json()["error"]
        except httpx.HTTPError as exc:  # Envoy may answer before the upload ends
            pytest.fail(f"no 413 read back: {exc}")
        assert status == 413 and error["type"] == "request_too_large", error
        now, peak = _rss(proc.pid)
        # bounded by the budget, not by the upload (before the budgets: +628 MB for 150 MB):
        # issue 27's goal, the budget + 64 MiB. h2: Envoy sends the upload in chunks of up to
        # 33 MiB, read without copies (router/bodywire.py, views from router/h2grpc.py);
        # measured +66-78 MiB here (with a copy per chunk in each of three places: +79-155).
        # grpcio: chunks of up to 9 MiB, each copied twice by grpcio: +89-100 MiB
        assert peak - before <= DEFAULT_MAX_BODY_BYTES + 64 * MIB, (before, peak)
        # the picker routes on, and the memory of the refused body is given back
        assert (
            httpx.post(envoy.url + "/v1/chat/completions", content=CHAT, timeout=30).status_code
            == 200
        )
        deadline = time.monotonic() + 10
        while _rss(proc.pid)[0] > before + 64 * MIB and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _rss(proc.pid)[0] <= before + 64 * MIB, (before, now)
    finally:
        envoy.stop()


def test_the_grpcio_server_refuses_a_message_over_its_receive_limit(engines, start_router) -> None:  # type: ignore[no-untyped-def]
    """grpcio copies each message twice, so it receives at most GRPCIO_MAX_RECEIVE_BYTES
    (below `server.max_message_bytes`' 64 MiB default): a larger one fails the stream with
    RESOURCE_EXHAUSTED (Envoy: 500) before any copy; the next stream is served."""
    import grpc

    (idle,) = engines("idle")
    router = start_router(router_config([idle.address], server={"grpc_server": "grpcio"}))
    wait_fresh(router, 1)
    assert grpcio_receive_limit(64 * MIB) == GRPCIO_MAX_RECEIVE_BYTES == 12 * MIB
    assert grpcio_receive_limit(4 * MIB) == 4 * MIB
    big = pb.ProcessingRequest(request_body=pb.HttpBody(body=b"x" * GRPCIO_MAX_RECEIVE_BYTES))
    with channel(router.grpc_port) as ch:
        with pytest.raises(grpc.RpcError) as err:
            list(SERVICE.stub(ch).Process(iter([headers_msg(DUPLEX), big]), timeout=20))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        ok = list(
            SERVICE.stub(ch).Process(
                iter([headers_msg(DUPLEX), *body_msgs(CHAT, 65536)]), timeout=10
            )
        )
        assert ok[0].WhichOneof("response") == "request_headers"
    assert router.bodies.held == 0
