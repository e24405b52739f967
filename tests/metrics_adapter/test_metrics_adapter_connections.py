"""The adapter's ports bound connections and the time a request may take, tested over the
wire on the running adapter (HTTP: metrics_adapter/httpserver.py; the KEDA gRPC port at the
end).

Before these bounds, 16 clients that declared 4 MiB pushes and sent one byte every 10 s held
the 64 MiB of `otlp_max_bodies_bytes` for as long as they kept dripping (the bytes were
counted from Content-Length and the only timeout was 90 s between two reads), so every real
push got 429; and every connection opened was kept for 90 s (16,000 idle connections: RSS
72 -> 206 MiB). The body-bytes bound itself is tested in test_metrics_adapter_otlp.py.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import httpx
import pytest
from google.rpc import status_pb2

from kvspread import names
from metrics_adapter import httpserver
from metrics_adapter.keda import externalscaler_pb2 as pb
from metrics_adapter.keda.scaler import SERVICE
from metrics_adapter.server import AdapterThread
from tests.metrics_adapter.adapter_otlp_payloads import gauge, request
from tests.metrics_adapter.adapter_testing import (
    Pki,
    api_client,
    base_config,
    client_context,
    hpa_headers,
)
from tests.ports import free_port

PROTOBUF = {"content-type": "application/x-protobuf"}
DISCOVERY = "/apis/external.metrics.k8s.io/v1beta1"


def _answer(s: socket.socket, limit: float = 20.0) -> bytes:
    """Everything the server sends until it closes (or `limit` seconds pass)."""
    s.settimeout(limit)
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return out


def _split(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = dict(
        (k.strip().lower(), v.strip()) for k, v in (ln.split(":", 1) for ln in lines[1:])
    )
    return status, headers, body


def _metric(port: int, name: str, which: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    m = re.search(rf'^{name}{{port="{which}"}} (\S+)$', text, re.M)
    assert m, text
    return float(m.group(1))


def _until(cond, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(400):
        if cond():
            return
        time.sleep(0.025)
    raise AssertionError(what)


@contextmanager
def _open(port: int, n: int) -> Iterator[list[socket.socket]]:
    socks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(n)]
    try:
        yield socks
    finally:
        for s in socks:
            s.close()


def test_a_dripping_push_gets_408_and_gives_its_bytes_back(pki: Pki) -> None:
    """A push whose body comes a byte at a time is answered 408 when `request_timeout` has
    passed since its first byte, however often bytes come, and its held bytes return."""
    cfg = base_config(
        pki, otlp_max_body_bytes=4096, otlp_max_bodies_bytes=6000, request_timeout="1s"
    )
    with AdapterThread(cfg) as a:
        port = a.adapter.otlp_port
        url = f"http://127.0.0.1:{port}/v1/metrics"
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            s.sendall(
                b"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf"
                b"\r\nContent-Length: 4096\r\n\r\n" + b"\0" * 4000
            )
            _until(lambda: a.adapter.otlp_http.held > 4000, "the drip's bytes are held")
            assert httpx.post(url, content=b"\0" * 4096, headers=PROTOBUF).status_code == 429
            s.settimeout(0.2)
            raw = b""
            for _ in range(100):  # a byte every 0.2 s: each read comes well within 90 s
                try:
                    s.send(b"\0")
                    raw = s.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    break
                if raw:
                    break
            raw += _answer(s)
        finally:
            s.close()
        status, headers, body = _split(raw)
        assert status == 408
        assert headers["connection"] == "close"
        refused = status_pb2.Status.FromString(body)  # in the request's encoding
        assert "did not arrive whole within 1 s" in refused.message
        # the drip's bytes are back: a push of 4096 is read (zeros: 400, not 429)
        _until(lambda: a.adapter.otlp_http.held == 0, "the drip's bytes are released")
        assert httpx.post(url, content=b"\0" * 4096, headers=PROTOBUF).status_code == 400


def test_a_head_sent_a_byte_at_a_time_gets_408_on_the_api_port(pki: Pki) -> None:
    """A slow head (slowloris) on the HTTPS API: 408 in JSON, then the connection closes."""
    with AdapterThread(base_config(pki, request_timeout="1s")) as a:
        ctx = client_context(pki, pki.client_pem)
        raw_sock = socket.create_connection(("127.0.0.1", a.adapter.api_port), timeout=10)
        with ctx.wrap_socket(raw_sock, server_hostname="localhost") as s:
            s.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n")
            s.settimeout(0.2)
            raw = b""
            for i in range(100):
                try:
                    s.sendall(f"X-Slow-{i}: 1\r\n".encode())
                    raw = s.recv(65536)
                except TimeoutError:
                    continue
                except (OSError, ssl.SSLError):
                    break
                if raw:
                    break
            raw += _answer(s)
        status, headers, body = _split(raw)
        assert status == 408
        assert "did not arrive whole" in json.loads(body)["message"]


def test_a_connection_that_sends_nothing_is_closed_without_an_answer(pki: Pki) -> None:
    with AdapterThread(base_config(pki, request_timeout="1s")) as a:
        with _open(a.adapter.otlp_port, 1) as (s,):
            assert _answer(s) == b""  # closed, nothing sent: no request, no answer


def test_keep_alive_may_wait_longer_than_the_request_deadline(pki: Pki) -> None:
    """The deadline runs from a request's first byte: between requests a keep-alive
    connection waits up to its idle timeout (90 s), as exporters reuse connections."""
    with AdapterThread(base_config(pki, request_timeout="1s")) as a:
        with _open(a.adapter.otlp_port, 1) as (s,):
            for _ in range(2):
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                s.settimeout(10)
                raw = s.recv(65536)
                while not raw.endswith(b"\r\n\r\nok"):  # the whole answer, body "ok"
                    chunk = s.recv(65536)
                    assert chunk, raw  # closed before the answer ended
                    raw += chunk
                assert raw.startswith(b"HTTP/1.1 200"), raw
                time.sleep(1.5)  # longer than request_timeout


def _held(port: int, n: int) -> list[socket.socket]:
    """`n` pushes begun and not finished (head and 10 of 4096 body bytes): busy connections."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(
            b"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf"
            b"\r\nContent-Length: 4096\r\n\r\n" + b"\0" * 10
        )
        socks.append(s)
    return socks


def test_busy_otlp_connections_over_the_limit_get_503_and_probes_answer(pki: Pki) -> None:
    with AdapterThread(base_config(pki, otlp_max_connections=2)) as a:
        port = a.adapter.otlp_port
        url = f"http://127.0.0.1:{port}/v1/metrics"
        busy = _held(port, 2)
        try:
            # /metrics and the probes are answered over the limit: the flood shows
            _until(
                lambda: _metric(port, "kvspread_adapter_connections", "otlp") == 2,
                "the two pushes are served",
            )
            r = httpx.post(url, content=b"\0", headers=PROTOBUF)
            assert r.status_code == 503
            assert r.headers["retry-after"] == "1"  # OTLP exporters retry 503
            assert "otlp_max_connections" in status_pb2.Status.FromString(r.content).message
            assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
            assert _metric(port, "kvspread_adapter_connections_refused_total", "otlp") == 1
            busy[0].close()  # one slot free: pushes are read again
            _until(
                lambda: httpx.post(url, content=b"\0", headers=PROTOBUF).status_code == 400,
                "a push is read once a connection closed",
            )
        finally:
            for s in busy:
                s.close()


def test_at_the_limit_a_new_connection_takes_the_place_of_the_longest_idle(pki: Pki) -> None:
    """Connections that have sent nothing cannot fill the port: at the limit the one idle
    longest is closed and the new one served (before, 16,000 idle connections were kept)."""
    with AdapterThread(base_config(pki, otlp_max_connections=2)) as a:
        port = a.adapter.otlp_port
        with _open(port, 1) as (oldest,):
            _until(lambda: a.adapter.otlp_http.connections == 1, "the first is served")
            with _open(port, 1) as (newer,):
                _until(lambda: a.adapter.otlp_http.connections == 2, "the second is served")
                r = httpx.post(f"http://127.0.0.1:{port}/v1/metrics", content=b"\0",
                               headers=PROTOBUF)  # fmt: skip
                assert r.status_code == 400  # read (not a valid push), not refused
                assert _answer(oldest) == b""  # closed without an answer: it asked nothing
                newer.settimeout(0.2)
                with pytest.raises(TimeoutError):
                    newer.recv(1)  # still open
        assert _metric(port, "kvspread_adapter_connections_evicted_total", "otlp") == 1


def test_api_connections_over_the_limit_get_503_and_probes_still_answer(pki: Pki) -> None:
    with AdapterThread(base_config(pki, max_connections=1)) as a:
        ctx = client_context(pki, pki.client_pem)
        raw_sock = socket.create_connection(("127.0.0.1", a.adapter.api_port), timeout=10)
        with ctx.wrap_socket(raw_sock, server_hostname="localhost") as busy:
            busy.sendall(b"GET /livez HTTP/1.1\r\n")  # a request begun, not finished
            _until(lambda: a.adapter.api_http.connections == 1, "the busy connection is served")
            with api_client(pki, a) as c:
                r = c.get(DISCOVERY)
                assert r.status_code == 503
                assert r.headers["retry-after"] == "1"
                assert "max_connections" in r.json()["message"]
                assert c.get("/livez").status_code == 200  # the kubelet's probe
        with api_client(pki, a) as c:
            _until(lambda: c.get(DISCOVERY).status_code != 503, "served once the busy closed")


def test_tls_handshakes_in_progress_are_bounded_and_a_real_client_gets_in(pki: Pki) -> None:
    """TCP connections to the API port that never send a ClientHello: at most
    MAX_HANDSHAKES wait (each holds asyncio's 256 KiB SSL buffer), a newer one takes the
    oldest's place, and a real client's handshake and request go through meanwhile. Before
    the bound, 2,000 such connections took the adapter from 71 to 470 MiB RSS."""
    n = httpserver.MAX_HANDSHAKES + 40
    with AdapterThread(base_config(pki)) as a:
        http = a.adapter.api_http
        with _open(a.adapter.api_port, n) as stalled:
            _until(lambda: http.evicted_connections >= 40, "the oldest handshakes are closed")
            assert len(http._handshakes) <= httpserver.MAX_HANDSHAKES
            assert _answer(stalled[0], 2.0) == b""  # the oldest: closed without a word
            with api_client(pki, a) as c:
                assert c.get(DISCOVERY, headers=hpa_headers()).status_code == 200
        assert http.connections <= 1


def test_a_refused_body_is_drained_so_the_client_reads_its_answer(pki: Pki) -> None:
    """413 to a client that goes on sending its 2 MiB body after the answer: the server reads
    and drops it while it closes (lingering), so the client's writes succeed and it reads the
    413. Closing at once, its later writes met a reset (BrokenPipeError here)."""
    cfg = base_config(pki, otlp_max_body_bytes=4096)
    with AdapterThread(cfg) as a:
        with _open(a.adapter.otlp_port, 1) as (s,):
            body = b"\0" * (2 << 20)
            s.sendall(
                b"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf"
                + f"\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body[:65536]
            )
            time.sleep(0.3)  # the 413 is written by now
            s.sendall(body[65536:])
            status, _, refused = _split(_answer(s))
        assert status == 413
        assert "exceeds 4096" in status_pb2.Status.FromString(refused).message


def test_refusals_in_progress_are_bounded(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the limit with none idle, a connection waits for its head (up to 5 s) before its
    503; at most REFUSING_MAX wait at once, and one more is closed unanswered (here 1)."""
    monkeypatch.setattr(httpserver, "REFUSING_MAX", 1)
    with AdapterThread(base_config(pki, otlp_max_connections=1)) as a:
        port = a.adapter.otlp_port
        busy = _held(port, 1)
        try:
            _until(lambda: a.adapter.otlp_http.connections == 1, "the busy one is served")
            with _open(port, 1) as (waiting,):
                _until(
                    lambda: a.adapter.otlp_http.refused_connections == 1, "the second is refused"
                )
                with _open(port, 1) as (third,):
                    assert _answer(third) == b""  # closed at once, unanswered
                waiting.sendall(
                    b"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
                )
                status, headers, _ = _split(_answer(waiting))
                assert status == 503
                assert headers["retry-after"] == "1"
        finally:
            busy[0].close()
        assert a.adapter.otlp_http.refused_connections == 2


def test_a_client_that_never_reads_its_answer_is_dropped(pki: Pki) -> None:
    """Writing an answer may take `request_timeout` too: a client that sends requests and
    reads nothing no longer holds its connection once the socket buffers fill."""
    with AdapterThread(base_config(pki, request_timeout="1s")) as a:
        port = a.adapter.otlp_port
        with _open(port, 1) as (s,):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            stop = threading.Event()

            def pipeline() -> None:
                with pytest.raises(OSError):
                    while not stop.is_set():
                        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 64)

            t = threading.Thread(target=pipeline, daemon=True)
            t.start()
            _until(lambda: a.adapter.otlp_http.connections == 1, "the reader is served")
            _until(lambda: a.adapter.otlp_http.connections == 0, "the non-reader is dropped")
            stop.set()


def test_unfinished_heads_count_against_the_bytes_in_flight(pki: Pki) -> None:
    """Head bytes are held too while a head arrives (up to 64 KiB each): 4,096 unfinished
    60 KB heads took RSS from 71 to 575 MiB before they counted against the bound."""
    cfg = base_config(pki, otlp_max_body_bytes=4096, otlp_max_bodies_bytes=6000)
    with AdapterThread(cfg) as a:
        port = a.adapter.otlp_port
        url = f"http://127.0.0.1:{port}/v1/metrics"
        with _open(port, 1) as (s,):
            s.sendall(b"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 5000)
            _until(lambda: a.adapter.otlp_http.held > 5000, "the head's bytes are held")
            r = httpx.post(url, content=b"\0" * 2000, headers=PROTOBUF)
            assert r.status_code == 429
            assert "otlp_max_bodies_bytes" in status_pb2.Status.FromString(r.content).message
        _until(lambda: a.adapter.otlp_http.held == 0, "the head's bytes are released")
        assert httpx.post(url, content=b"\0" * 2000, headers=PROTOBUF).status_code == 400


# --- the KEDA gRPC port (grpc.aio; metrics_adapter/keda/scaler.py)

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
"""The HTTP/2 client preface and an empty SETTINGS frame: a connection that asks nothing."""


def _keda_ref() -> pb.ScaledObjectRef:
    meta = {"metricName": names.SLI_QUEUE_DEPTH, "labelSelector": "service=x", "targetValue": "2"}
    return pb.ScaledObjectRef(name="x", namespace="llm", scalerMetadata=meta)


def _channel(port: int) -> grpc.Channel:
    """A channel with its own connection (grpcio shares connections between a process's
    channels to one address unless told; each call here must count as a new client)."""
    return grpc.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)]
    )


def _keda_call(port: int) -> grpc.StatusCode:
    with _channel(port) as ch:
        try:
            SERVICE.stub(ch).GetMetricSpec(_keda_ref(), timeout=5)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def test_keda_connections_over_the_limit_are_closed_and_come_back(pki: Pki) -> None:
    """Without the limit, 5,000 connections that sent the HTTP/2 preface and nothing more
    were all kept (RSS 74 -> 146 MiB); now at keda_max_connections more are closed at
    accept, and places come back when connections close."""
    cfg = base_config(pki, keda_port=free_port(), keda_max_connections=2)
    with AdapterThread(cfg) as a:
        assert a.adapter.keda is not None
        port = a.adapter.keda.port
        with _open(port, 2) as idle:
            for s in idle:
                s.sendall(H2_PREFACE)
                s.settimeout(10)
                assert s.recv(9)[3] == 0x4  # the server's SETTINGS: accepted and served
            assert _keda_call(port) == grpc.StatusCode.UNAVAILABLE
        _until(lambda: _keda_call(port) == grpc.StatusCode.OK, "served once they closed")


def test_keda_idle_connections_get_goaway(pki: Pki) -> None:
    """A connection without a call gets GOAWAY after idle_s (60 s by default; 1 s here)."""
    t = AdapterThread(base_config(pki, keda_port=free_port()))
    assert t.adapter.keda is not None
    t.adapter.keda.idle_s = 1.0
    with t as a:
        assert a.adapter.keda is not None
        with _open(a.adapter.keda.port, 1) as (s,):
            s.sendall(H2_PREFACE)
            frames = _answer(s)  # until the server closes (or 20 s)
        types = []
        while len(frames) >= 9:  # HTTP/2 frames: 3 bytes length, 1 byte type, ...
            n = int.from_bytes(frames[:3], "big")
            types.append(frames[3])
            frames = frames[9 + n :]
        assert 0x7 in types  # GOAWAY


def test_keda_calls_in_progress_are_bounded(pki: Pki) -> None:
    """keda_max_rpcs counts StreamIsActive streams: past it a call gets RESOURCE_EXHAUSTED."""
    with AdapterThread(base_config(pki, keda_port=free_port(), keda_max_rpcs=1)) as a:
        assert a.adapter.keda is not None
        port = a.adapter.keda.port
        res = {names.ATTR_K8S_NAMESPACE: "llm", names.ATTR_SERVICE_NAME: "x"}
        waiting = gauge(names.ENGINE_REQUESTS_WAITING.name, [(time.time(), 3, {})])
        r = httpx.post(f"http://127.0.0.1:{a.adapter.otlp_port}/v1/metrics",
                       content=request(res, [waiting]).SerializeToString(), headers=PROTOBUF)  # fmt: skip
        assert r.status_code == 200, r.text
        with _channel(port) as ch:
            stream = SERVICE.stub(ch).StreamIsActive(_keda_ref())
            assert next(stream).result  # the stream runs (3 waiting: active)
            try:
                _until(
                    lambda: _keda_call(port) == grpc.StatusCode.RESOURCE_EXHAUSTED,
                    "a call beside the stream is refused",
                )
            finally:
                stream.cancel()
        _until(lambda: _keda_call(port) == grpc.StatusCode.OK, "served once the stream ended")


def test_expect_100_continue_is_answered_before_the_body(pki: Pki) -> None:
    """curl sends `Expect: 100-continue` with bodies over 1 MB and waits a second for the
    interim answer (a client that waits for it got nothing until the request deadline); a
    body over the limit gets its 413 instead, so it is never sent."""
    cfg = base_config(pki, otlp_max_body_bytes=4096)
    body = request({names.ATTR_SERVICE_NAME: "s"}, [gauge("g", [(time.time(), 1.0, {})])])
    data = body.SerializeToString()
    head = ("POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            "Expect: 100-continue\r\nContent-Length: {}\r\n\r\n")  # fmt: skip
    with AdapterThread(cfg) as a:
        with _open(a.adapter.otlp_port, 2) as (s, big):
            s.sendall(head.format(len(data)).encode())
            s.settimeout(10)
            interim = s.recv(65536)
            assert interim.startswith(b"HTTP/1.1 100 ") and interim.endswith(b"\r\n\r\n")
            s.sendall(data)
            status, _, _ = _split(s.recv(65536))
            big.sendall(head.format(1 << 20).encode())
            refused, _, msg = _split(_answer(big, 10))
    assert status == 200
    assert refused == 413
    assert "exceeds 4096" in status_pb2.Status.FromString(msg).message


def test_refusals_before_the_handler_are_a_status_on_the_api_port_and_coded_on_otlp(
    pki: Pki,
) -> None:
    """The HTTP layer's own refusals (a body over 64 KiB, a request line that is not HTTP)
    were a bare {"message": ...} on the API port, where every other answer is a
    metav1.Status; on the OTLP port every error carried INVALID_ARGUMENT, 404 and 413 too."""
    with AdapterThread(base_config(pki, otlp_max_body_bytes=4096)) as a:
        ctx = client_context(pki, pki.client_pem)
        answers = []
        for raw_req in (
            b"POST /apis HTTP/1.1\r\nHost: x\r\nContent-Length: 70000\r\n\r\n",
            b"GARBAGE\r\n\r\n",
        ):
            raw_sock = socket.create_connection(("127.0.0.1", a.adapter.api_port), timeout=10)
            with ctx.wrap_socket(raw_sock, server_hostname="localhost") as s:
                s.sendall(raw_req)
                answers.append(_split(_answer(s, 10)))
        url = f"http://127.0.0.1:{a.adapter.otlp_port}"
        missing = httpx.post(f"{url}/v2/metrics", content=b"", headers=PROTOBUF)
        large = httpx.post(f"{url}/v1/metrics", content=b"\0" * 5000, headers=PROTOBUF)
    (big, _, big_body), (bad, _, bad_body) = answers
    big_doc, bad_doc = json.loads(big_body), json.loads(bad_body)
    assert big == 413 and big_doc["kind"] == "Status" and big_doc["code"] == 413
    assert big_doc["reason"] == "RequestEntityTooLarge" and "exceeds 65536" in big_doc["message"]
    assert bad == 400 and bad_doc["kind"] == "Status" and bad_doc["reason"] == "BadRequest"
    assert missing.status_code == 404
    assert status_pb2.Status.FromString(missing.content).code == 5  # NOT_FOUND
    assert large.status_code == 413
    assert status_pb2.Status.FromString(large.content).code == 8  # RESOURCE_EXHAUSTED
