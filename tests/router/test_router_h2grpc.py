"""router/h2grpc.py: the HPACK decoder against the `hpack` package's encoder, and the
HTTP/2 gRPC server against grpcio's client (health Check and Watch, unknown methods,
message limits, handler errors, large messages through flow control) and against nghttp2's
(curl, Node's http2 module), the HTTP/2 stack of many gateways and tools."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import hpack
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from router.h2grpc import (
    INVALID_ARGUMENT,
    GrpcError,
    HealthStatus,
    HPACKDecoder,
    HPACKError,
)
from tests.router.conftest import h2_serving

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def test_hpack_decoder_follows_the_encoders_dynamic_table() -> None:
    enc, dec = hpack.Encoder(), HPACKDecoder()
    blocks = [
        [(":method", "POST"), (":path", "/a.B/C"), ("x-request-id", "abc-123"), ("te", "trailers")],
        [(":method", "POST"), (":path", "/a.B/C"), ("x-request-id", "abc-123"), ("te", "trailers")],
        [(":method", "POST"), (":path", "/a.B/D"), ("x-request-id", "zzz-999" * 20)],
        [(":method", "POST"), (":path", "/a.B/C"), ("x-request-id", "abc-123"), ("te", "trailers")],
    ]
    for headers in blocks:
        got = dec.decode(enc.encode(headers, huffman=True))
        assert [(n.decode(), v.decode()) for n, v in got] == headers
    # never-indexed literals and a table size update
    enc.header_table_size = 256
    sensitive = [("authorization", hpack.NeverIndexedHeaderTuple("authorization", "secret"))]
    got = dec.decode(enc.encode([sensitive[0][1], (":path", "/x")], huffman=False))
    assert got == [(b"authorization", b"secret"), (b":path", b"/x")]


def test_hpack_cached_block_follows_a_table_change() -> None:
    # a block of an indexed dynamic entry and a never-indexed literal leaves the table as
    # it was, so its decoding is cached; a block that adds an entry moves index 62 to the
    # new header, and the same bytes must then decode to that one
    dec = HPACKDecoder()

    def lit(flag: int, name: bytes, value: bytes) -> bytes:
        return bytes([flag, len(name)]) + name + bytes([len(value)]) + value

    repeated = b"\xbe" + lit(0x10, b"x-n", b"v")  # index 62, never-indexed literal
    dec.decode(lit(0x40, b"x-a", b"1"))
    assert dec.decode(repeated) == [(b"x-a", b"1"), (b"x-n", b"v")]
    assert dec.decode(repeated) == [(b"x-a", b"1"), (b"x-n", b"v")]
    dec.decode(lit(0x40, b"x-b", b"2"))
    assert dec.decode(repeated) == [(b"x-b", b"2"), (b"x-n", b"v")]


def test_hpack_decoder_refuses_garbage() -> None:
    dec = HPACKDecoder()
    with pytest.raises(HPACKError):
        dec.decode(b"\xff")  # index past both tables (integer truncated)
    with pytest.raises(HPACKError):
        dec.decode(b"\xbf\x40")  # dynamic index that does not exist
    with pytest.raises(HPACKError):
        dec.decode(b"\x40\x05ab")  # literal name shorter than its length


class Echo:
    """A test stream handler: echoes each message, fails on request."""

    finished = False

    def on_message(self, data: bytes | memoryview) -> list[bytes]:
        # messages of 1 MiB and more come as views (router/h2grpc.py's _VIEW_FROM)
        assert not isinstance(data, memoryview) or len(data) >= 1 << 20
        if data == b"bad":
            raise GrpcError(INVALID_ARGUMENT, "bad input")
        if data == b"boom":
            raise RuntimeError("handler bug")
        if bytes(data[:3]) == b"big":
            return [b"x" * (8 << 20)]
        return [bytes(data), bytes(data)]


@pytest.fixture
def server() -> Iterator[tuple[int, HealthStatus, asyncio.AbstractEventLoop]]:
    health = HealthStatus()
    health.set("readiness", SERVING)
    with h2_serving({"/t.Echo/Stream": Echo}, health, max_message_bytes=16 << 20) as (srv, loop):
        yield srv.port, health, loop


def _channel(port: int) -> grpc.Channel:
    return grpc.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", 64 << 20)]
    )


def _echo(ch: grpc.Channel, msgs: list[bytes]) -> list[bytes]:
    call: Any = ch.stream_stream("/t.Echo/Stream")
    return list(call(iter(msgs), timeout=10))


def test_stream_messages_and_statuses(server) -> None:  # type: ignore[no-untyped-def]
    port, *_ = server
    with _channel(port) as ch:
        assert _echo(ch, [b"a", b"bc"]) == [b"a", b"a", b"bc", b"bc"]
        assert _echo(ch, []) == []
        for msg, code, text in (
            (b"bad", grpc.StatusCode.INVALID_ARGUMENT, "bad input"),
            (b"boom", grpc.StatusCode.INTERNAL, "handler bug"),
        ):
            with pytest.raises(grpc.RpcError) as err:
                _echo(ch, [msg])
            assert err.value.code() == code and text in str(err.value.details())
        nope: Any = ch.unary_unary("/t.Echo/Nope")
        with pytest.raises(grpc.RpcError) as err:
            nope(b"", timeout=5)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_large_messages_both_ways_and_the_limit(server) -> None:  # type: ignore[no-untyped-def]
    port, *_ = server
    opts = [
        ("grpc.max_receive_message_length", 64 << 20),
        ("grpc.max_send_message_length", 64 << 20),
    ]
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=opts) as ch:
        body = b"big" + b"y" * (12 << 20)  # past every default window: flow control both ways
        (got,) = _echo(ch, [body])
        assert len(got) == 8 << 20
        with pytest.raises(grpc.RpcError) as err:
            _echo(ch, [b"z" * (17 << 20)])
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_health_check_and_watch(server) -> None:  # type: ignore[no-untyped-def]
    port, health, loop = server
    with _channel(port) as ch:
        stub: Any = health_pb2_grpc.HealthStub(ch)
        req = health_pb2.HealthCheckRequest(service="readiness")
        assert stub.Check(req, timeout=5).status == SERVING
        with pytest.raises(grpc.RpcError) as err:
            stub.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=5)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        watch = stub.Watch(req, timeout=10)
        assert next(watch).status == SERVING
        loop.call_soon_threadsafe(health.set, "readiness", NOT_SERVING)
        assert next(watch).status == NOT_SERVING
        watch.cancel()
        unknown = stub.Watch(health_pb2.HealthCheckRequest(service="later"), timeout=10)
        assert next(unknown).status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
        loop.call_soon_threadsafe(health.set, "later", SERVING)
        assert next(unknown).status == SERVING
        unknown.cancel()


def _goaway_after(port: int, data: bytes) -> bytes:
    """Send raw bytes; return what the server wrote until it closed the connection."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
    return got


def _frames(data: bytes) -> list[int]:
    kinds, pos = [], 0
    while pos + 9 <= len(data):
        length = int.from_bytes(data[pos : pos + 3], "big")
        kinds.append(data[pos + 3])
        pos += 9 + length
    return kinds


def test_a_peer_breaking_http2_gets_goaway_and_the_close(server) -> None:  # type: ignore[no-untyped-def]
    port, *_ = server
    http1 = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    assert _frames(_goaway_after(port, http1))[-1] == 7  # SETTINGS first, then GOAWAY
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    headers = b"\x00\x00\x01\x01\x00\x00\x00\x00\x01" + b"\x82"  # HEADERS without END_HEADERS
    cont = b"\x00\x40\x00\x09\x00\x00\x00\x00\x01" + b"\x82" * 0x4000
    flood = preface + headers + cont * 65  # the 65th CONTINUATION passes the 1 MiB cap, last
    assert _frames(_goaway_after(port, flood))[-1] == 7


def _read_frames(sock: Any) -> Iterator[tuple[int, int, int, bytes]]:
    """(type, flags, stream, payload) of each frame the server writes, until it closes."""
    buf = b""
    while True:
        while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
            n = int.from_bytes(buf[:3], "big")
            yield buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9 : 9 + n]
            buf = buf[9 + n :]
        chunk = sock.recv(65536)
        if not chunk:
            return
        buf += chunk


def test_stop_drains_the_streams_in_flight_and_refuses_new_ones() -> None:
    import socket

    def frame(kind: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
        return (
            len(payload).to_bytes(3, "big")
            + bytes((kind, flags))
            + sid.to_bytes(4, "big")
            + payload
        )

    enc = hpack.Encoder()
    request = [(":method", "POST"), (":scheme", "http"), (":path", "/t.Echo/Stream"),
               (":authority", "x"), ("content-type", "application/grpc"), ("te", "trailers")]  # fmt: skip
    health = HealthStatus()
    with h2_serving({"/t.Echo/Stream": Echo}, health) as (srv, loop):
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
            sock.sendall(
                b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                + frame(4, 0, 0)
                + frame(1, 0x4, 1, enc.encode(request))
                + frame(0, 0, 1, _grpc_frame(b"a"))
            )
            frames = _read_frames(sock)
            for kind, _, sid, payload in frames:  # until stream 1's first answer
                if kind == 0 and sid == 1:
                    assert payload == _grpc_frame(b"a") * 2
                    break
            stopping = asyncio.run_coroutine_threadsafe(srv.stop(grace=30), loop)
            for kind, _, _sid, payload in frames:
                if kind == 7:  # GOAWAY: NO_ERROR, stream 1 the last one taken
                    assert payload[:8] == (1).to_bytes(4, "big") + (0).to_bytes(4, "big")
                    assert payload[8:] == b"server stopping"
                    break
            # a new stream is refused; the one in flight still gets its answer and status
            sock.sendall(
                frame(1, 0x4, 3, enc.encode(request)) + frame(0, 0x1, 1, _grpc_frame(b"b"))
            )
            rest = [(kind, sid, payload) for kind, _, sid, payload in frames]
        stopping.result(10)  # returned once the stream ended, long before the grace
    assert (3, 3, (7).to_bytes(4, "big")) in rest  # RST_STREAM REFUSED_STREAM
    assert (0, 1, _grpc_frame(b"b") * 2) in rest
    trailers = [p for kind, sid, p in rest if kind == 1 and sid == 1]
    assert len(trailers) == 1 and hpack.Decoder().decode(trailers[0]) == [("grpc-status", "0")]


# nghttp2, a third HTTP/2 implementation (after grpcio's and Envoy's): curl and Node's http2.
NODE_CLIENT = Path(__file__).with_name("node_grpc_client.js")


def _grpc_frame(msg: bytes) -> bytes:
    return b"\x00" + len(msg).to_bytes(4, "big") + msg


async def _set(health: HealthStatus, service: str, status: int) -> None:
    health.set(service, status)


def _node_call(port: int, path: str, msgs: list[bytes], mode: str = "") -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the nghttp2 client test needs Node's http2 module")
    args = [
        node,
        str(NODE_CLIENT),
        f"http://127.0.0.1:{port}",
        path,
        ",".join(m.hex() for m in msgs),
    ]
    out = subprocess.run(
        [*args, mode] if mode else args, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stdout + out.stderr
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def test_nghttp2_clients_health_check_and_watch(server) -> None:  # type: ignore[no-untyped-def]
    port, health, loop = server
    check = "/grpc.health.v1.Health/Check"
    readiness = [health_pb2.HealthCheckRequest(service="readiness").SerializeToString()]
    for status in (SERVING, NOT_SERVING):
        asyncio.run_coroutine_threadsafe(_set(health, "readiness", status), loop).result(5)
        got = _node_call(port, check, readiness)
        assert (got["status"], got["grpc_status"]) == (200, "0")
        (reply,) = got["messages"]
        assert (
            health_pb2.HealthCheckResponse.FromString(bytes.fromhex(reply["hex"])).status == status
        )
    asyncio.run_coroutine_threadsafe(_set(health, "readiness", SERVING), loop).result(5)
    got = _node_call(
        port, check, [health_pb2.HealthCheckRequest(service="nope").SerializeToString()]
    )
    assert got["grpc_status"] == "5" and "nope" in got["grpc_message"] and got["messages"] == []
    watch = "/grpc.health.v1.Health/Watch"
    got = _node_call(
        port,
        watch,
        [health_pb2.HealthCheckRequest(service="readiness").SerializeToString()],
        "first",
    )
    assert (
        health_pb2.HealthCheckResponse.FromString(bytes.fromhex(got["messages"][0]["hex"])).status
        == SERVING
    )

    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed: the curl (nghttp2) half of this test needs it")
    request = _grpc_frame(health_pb2.HealthCheckRequest(service="readiness").SerializeToString())
    out = subprocess.run(
        [
            curl,
            "-sS",
            "--http2-prior-knowledge",
            "-D",
            "-",
            "-o",
            "-",
            "--data-binary",
            "@-",
            "-H",
            "content-type: application/grpc",
            "-H",
            "te: trailers",
            f"http://127.0.0.1:{port}{check}",
        ],
        input=request,
        capture_output=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    head, _, rest = out.stdout.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/2 200")
    reply = _grpc_frame(health_pb2.HealthCheckResponse(status=SERVING).SerializeToString())
    assert rest.startswith(reply) and b"grpc-status: 0" in rest[len(reply) :]


def test_nghttp2_client_streams_and_flow_control(server) -> None:  # type: ignore[no-untyped-def]
    port, *_ = server
    got = _node_call(port, "/t.Echo/Stream", [b"a", b"bc" * 300])
    assert got["grpc_status"] == "0"
    assert [bytes.fromhex(m["hex"]) for m in got["messages"]] == [
        b"a",
        b"a",
        b"bc" * 300,
        b"bc" * 300,
    ]
    # An 8 MiB reply against nghttp2's 64 KiB default windows: the server's sends must wait
    # for Node's WINDOW_UPDATEs, then finish with the trailers.
    got = _node_call(port, "/t.Echo/Stream", [b"big"])
    assert got["grpc_status"] == "0"
    assert got["messages"] == [{"len": 8 << 20, "sum": ord("x") * (8 << 20)}]
    got = _node_call(port, "/t.Echo/Stream", [b"bad"])
    assert (got["grpc_status"], got["grpc_message"]) == ("3", "bad input")
