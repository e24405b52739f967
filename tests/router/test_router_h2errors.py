"""router/h2grpc.py against hostile and broken HTTP/2 peers, in raw frames over TCP: RFC 9113's
connection and stream errors (the frames issue 27 found crashing the connection among them),
the limits against the known attacks (rapid reset, CONTINUATION floods, HPACK bombs,
SETTINGS/PING floods, zero windows), and that the connection or the server goes on after a
stream error. Each test reads the server's answer frames; none needs the clock."""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Iterator

import hpack
import pytest

from router import h2grpc
from router.h2grpc import H2GrpcServer, HealthStatus
from tests.router.conftest import h2_serving
from tests.router.test_router_h2grpc import Echo, _grpc_frame

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST, SETTINGS, PUSH, PING, GOAWAY, WINDOW, CONT = range(10)
PROTOCOL_ERROR, FLOW_CONTROL_ERROR, STREAM_CLOSED, FRAME_SIZE_ERROR = 0x1, 0x3, 0x5, 0x6
REFUSED_STREAM, COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 0x7, 0x9, 0xB
REQUEST = [(":method", "POST"), (":scheme", "http"), (":path", "/t.Echo/Stream"),
           (":authority", "x"), ("content-type", "application/grpc"), ("te", "trailers")]  # fmt: skip


def frame(kind: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + sid.to_bytes(4, "big") + payload


def settings(*pairs: tuple[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs))


@pytest.fixture
def server() -> Iterator[H2GrpcServer]:
    health = HealthStatus()
    health.set("", 1)
    with h2_serving({"/t.Echo/Stream": Echo}, health, max_concurrent_streams=8) as (srv, _):
        yield srv


Frame = tuple[int, int, int, bytes]


def read_frames(sock: socket.socket, stop: Callable[[Frame], bool] | None = None) -> list[Frame]:
    """The server's frames (type, flags, stream, payload) until one for which `stop` is
    true, the server closes, or the socket's timeout passes."""
    got: list[Frame] = []
    buf = b""
    while True:
        while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
            n = int.from_bytes(buf[:3], "big")
            f = (buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9 : 9 + n])
            got.append(f)
            buf = buf[9 + n :]
            if stop is not None and stop(f):
                return got
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            return got
        if not chunk:
            return got
        buf += chunk


def exchange(srv: H2GrpcServer, data: bytes, until: int | None = None) -> list[Frame]:
    """Send the preface, empty SETTINGS and `data`; the server's frames until it closes (or
    until a frame of type `until`, after a PING the server answers last)."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        tail = frame(PING, 0, 0, b"lastping") if until is None else b""
        sock.sendall(PREFACE + settings() + data + tail)
        if until is None:
            return read_frames(sock, lambda f: f[0] == PING and f[3] == b"lastping")
        return read_frames(sock, lambda f: f[0] == until)


def goaway_code(frames: list[tuple[int, int, int, bytes]]) -> int | None:
    codes = [int.from_bytes(p[4:8], "big") for kind, _, _, p in frames if kind == GOAWAY]
    return codes[-1] if codes else None


def resets(frames: list[tuple[int, int, int, bytes]]) -> dict[int, int]:
    return {sid: int.from_bytes(p, "big") for kind, _, sid, p in frames if kind == RST}


@pytest.mark.parametrize(
    ("data", "code"),
    [
        # the frames issue 27 found raising out of data_received
        (frame(WINDOW, 0, 0, b"\x00\x01"), FRAME_SIZE_ERROR),
        (frame(HEADERS, 0x8 | 0x4, 1), FRAME_SIZE_ERROR),  # PADDED, no Pad Length
        (settings((0x5, 0)), PROTOCOL_ERROR),  # MAX_FRAME_SIZE 0 stalled the data before
        (settings((0x5, 1 << 24)), PROTOCOL_ERROR),
        (settings((0x2, 2)), PROTOCOL_ERROR),
        (settings((0x4, 1 << 31)), FLOW_CONTROL_ERROR),
        (frame(SETTINGS, 0, 0, b"\x00" * 5), FRAME_SIZE_ERROR),
        (frame(SETTINGS, 0x1, 0, b"\x00" * 6), FRAME_SIZE_ERROR),  # ACK with a payload
        (frame(SETTINGS, 0, 1), PROTOCOL_ERROR),
        (frame(PING, 0, 0, b"1234567"), FRAME_SIZE_ERROR),
        (frame(PING, 0, 1, b"12345678"), PROTOCOL_ERROR),
        (frame(DATA, 0, 0, b"x"), PROTOCOL_ERROR),
        (frame(DATA, 0, 1, b"x"), PROTOCOL_ERROR),  # idle stream
        (frame(RST, 0, 1, b"\x00\x00\x00\x08"), PROTOCOL_ERROR),  # idle stream
        (frame(RST, 0, 0, b"\x00\x00\x00\x08"), PROTOCOL_ERROR),
        (frame(WINDOW, 0, 3, b"\x00\x00\x00\x01"), PROTOCOL_ERROR),  # idle stream
        (frame(WINDOW, 0, 0, b"\x00\x00\x00\x00"), PROTOCOL_ERROR),
        (frame(WINDOW, 0, 0, b"\x7f\xff\xff\xff"), FLOW_CONTROL_ERROR),
        (frame(PRIORITY, 0, 0, b"\x00" * 5), PROTOCOL_ERROR),
        (frame(GOAWAY, 0, 1, b"\x00" * 8), PROTOCOL_ERROR),
        (frame(PUSH, 0x4, 1, b"\x00\x00\x00\x02"), PROTOCOL_ERROR),
        (frame(CONT, 0x4, 1, b"\x82"), PROTOCOL_ERROR),
        (frame(HEADERS, 0x4, 2, b"\x82"), PROTOCOL_ERROR),  # an even stream id
        (frame(HEADERS, 0x4, 1, b"\xff\xff\xff\xff\x7f"), COMPRESSION_ERROR),
        (frame(HEADERS, 0x4, 1, b"\x82\x20"), COMPRESSION_ERROR),  # size update after a field
        (b"\x20\x00\x00\x00" + bytes(5), FRAME_SIZE_ERROR),  # a 2 MiB DATA frame header
    ],
)
def test_connection_errors_answer_goaway_never_an_exception(
    server: H2GrpcServer, data: bytes, code: int
) -> None:
    frames = exchange(server, data)
    assert goaway_code(frames) == code
    assert server.internal_errors == 0


def test_stream_errors_reset_the_stream_and_the_connection_goes_on(server: H2GrpcServer) -> None:
    h = hpack.Encoder().encode  # blocks are encoded in the order they are sent
    frames = exchange(
        server,
        frame(HEADERS, 0x4 | 0x1, 1, h(REQUEST))  # half-closed (remote), then DATA on it
        + frame(DATA, 0, 1, b"x")
        + frame(PRIORITY, 0, 3, b"\x00\x00\x00\x03\x10")  # depends on itself
        + frame(PRIORITY, 0, 5, b"\x00" * 4)  # 4 bytes, not 5
        + frame(HEADERS, 0x4, 7, h([*REQUEST, ("Upper", "x")]))  # malformed
        + frame(HEADERS, 0x4, 9, h(REQUEST[1:]))  # no :method
        + frame(HEADERS, 0x4, 11, h([*REQUEST, ("content-length", "3")]))
        + frame(DATA, 0x1, 11, b"toolong")  # more than content-length
        + frame(HEADERS, 0x4, 13, h(REQUEST))
        + frame(WINDOW, 0, 13, b"\x00\x00\x00\x00")
        + frame(HEADERS, 0x4, 15, h(REQUEST))
        + frame(HEADERS, 0x4, 15, h([("x-more", "1")]))  # trailers without END_STREAM
        + frame(HEADERS, 0x4, 17, h(REQUEST))
        + frame(DATA, 0x1, 17, _grpc_frame(b"ok")),
    )
    assert resets(frames) == {
        1: STREAM_CLOSED,
        3: PROTOCOL_ERROR,
        5: FRAME_SIZE_ERROR,
        7: PROTOCOL_ERROR,
        9: PROTOCOL_ERROR,
        11: PROTOCOL_ERROR,
        13: PROTOCOL_ERROR,
        15: PROTOCOL_ERROR,
    }
    assert goaway_code(frames) is None  # the connection stayed up: stream 17 was answered
    assert (DATA, 0, 17, _grpc_frame(b"ok") * 2) in frames
    assert server.internal_errors == 0


def test_frames_after_a_stream_closed_are_told_from_late_ones(server: H2GrpcServer) -> None:
    h = hpack.Encoder().encode
    # stream 1 ended both ways: a WINDOW_UPDATE may still come, DATA is a stream error ...
    frames = exchange(
        server,
        frame(HEADERS, 0x4 | 0x1, 1, h(REQUEST))
        + frame(WINDOW, 0, 1, b"\x00\x00\x00\x01")
        + frame(DATA, 0, 1, b"late"),
    )
    assert resets(frames) == {1: STREAM_CLOSED}
    assert goaway_code(frames) is None
    # ... and HEADERS a connection error STREAM_CLOSED (RFC 9113 section 5.1)
    h = hpack.Encoder().encode
    frames = exchange(
        server, frame(HEADERS, 0x4 | 0x1, 1, h(REQUEST)) + frame(HEADERS, 0x5, 1, h(REQUEST))
    )
    assert goaway_code(frames) == STREAM_CLOSED
    # a stream id below the last one, never opened: PROTOCOL_ERROR (RFC 9113 section 5.1.1)
    h = hpack.Encoder().encode
    frames = exchange(
        server, frame(HEADERS, 0x5, 5, h(REQUEST)) + frame(HEADERS, 0x5, 3, h(REQUEST))
    )
    assert goaway_code(frames) == PROTOCOL_ERROR
    assert server.internal_errors == 0


def test_streams_past_the_advertised_limit_are_refused(server: H2GrpcServer) -> None:
    enc = hpack.Encoder()
    opened = b"".join(frame(HEADERS, 0x4, 2 * i + 1, enc.encode(REQUEST)) for i in range(10))
    frames = exchange(server, opened)
    advertised = dict(
        struct.unpack_from(">HI", frames[0][3], i) for i in range(0, len(frames[0][3]), 6)
    )
    assert advertised[0x3] == 8  # SETTINGS_MAX_CONCURRENT_STREAMS
    assert resets(frames) == {17: REFUSED_STREAM, 19: REFUSED_STREAM}
    assert goaway_code(frames) is None


def test_rapid_reset_ends_the_connection_past_its_budget(server: H2GrpcServer) -> None:
    enc = hpack.Encoder()
    cycle = b"".join(
        frame(HEADERS, 0x4, 2 * i + 1, enc.encode(REQUEST))
        + frame(RST, 0, 2 * i + 1, b"\x00\x00\x00\x08")
        for i in range(h2grpc._RESET_BUDGET + 1)
    )
    assert goaway_code(exchange(server, cycle)) == ENHANCE_YOUR_CALM
    # answered streams earn the budget back: as many resets again, each after an answer
    enc = hpack.Encoder()
    mixed = b"".join(
        frame(HEADERS, 0x4, 4 * i + 1, enc.encode(REQUEST))
        + frame(RST, 0, 4 * i + 1, b"\x00\x00\x00\x08")
        + frame(HEADERS, 0x5, 4 * i + 3, enc.encode(REQUEST))
        for i in range(h2grpc._RESET_BUDGET + 10)
    )
    assert goaway_code(exchange(server, mixed)) is None


def test_continuation_flood_of_empty_frames_is_cut(server: H2GrpcServer) -> None:
    flood = frame(HEADERS, 0, 1, b"\x82") + frame(CONT, 0, 1) * (h2grpc._MAX_CONTINUATIONS + 1)
    assert goaway_code(exchange(server, flood)) == ENHANCE_YOUR_CALM


def test_an_hpack_bomb_is_refused_and_the_connection_goes_on(server: H2GrpcServer) -> None:
    # one 4 KiB entry in the dynamic table, then referenced 4000 times: 16 MB decoded
    enc = hpack.Encoder()
    request = enc.encode(REQUEST)
    big = enc.encode([("x-big", "v" * 4000)], huffman=False)  # incremental: index 62
    bomb = b"\xbe" * 4000
    frames = exchange(
        server,
        frame(HEADERS, 0x5, 1, request)
        + frame(HEADERS, 0x5, 3, big)  # malformed (no pseudo-headers) but fills the table
        + frame(HEADERS, 0x5, 5, bomb)
        + frame(HEADERS, 0x5, 7, enc.encode(REQUEST)),
    )
    trailers = [
        hpack.Decoder().decode(p) for kind, _, sid, p in frames if kind == HEADERS and sid == 5
    ]
    assert trailers and ("grpc-status", "8") in trailers[0]
    assert goaway_code(frames) is None
    assert any(kind == HEADERS and sid == 7 for kind, _, sid, _ in frames)


def _settle(srv: H2GrpcServer) -> list[h2grpc._Connection]:
    return list(srv._connections)


def test_a_ping_flood_from_a_peer_that_never_reads_stops_being_read(server: H2GrpcServer) -> None:
    # each PING asks for an ACK; a peer that never reads makes the server stop reading it
    # once _WRITE_HIGH bytes wait, so what is held stays bounded however long it sends
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(PREFACE + settings())
        sock.settimeout(2)
        ping = frame(PING, 0, 0, b"12345678") * 4096
        sent = 0
        try:
            while sent < 400 << 20:
                sock.sendall(ping)
                sent += len(ping)
        except (TimeoutError, OSError):
            pass  # the server stopped reading: the kernel's buffers filled
        (conn,) = _settle(server)
        assert conn.transport is not None
        held = conn.transport.get_write_buffer_size()
    assert sent < 400 << 20
    assert held <= h2grpc._WRITE_HIGH + (1 << 20)  # the mark, plus one read's answers
    assert server.internal_errors == 0


def test_answers_held_for_a_zero_window_are_bounded() -> None:
    health = HealthStatus()
    enc = hpack.Encoder()
    with h2_serving({"/t.Echo/Stream": Echo}, health, max_pending_bytes=4 << 20) as (srv, _):
        # the peer's windows are 0: Echo's 8 MiB answer cannot go out; the server gives up
        # at its limit instead of holding it (and more) for ever
        frames = exchange(
            srv,
            settings((0x4, 0))
            + frame(HEADERS, 0x4, 1, enc.encode(REQUEST))
            + frame(DATA, 0, 1, _grpc_frame(b"big")),
            until=GOAWAY,
        )
        assert goaway_code(frames) == ENHANCE_YOUR_CALM
        assert srv.internal_errors == 0


def test_partial_messages_held_over_a_connection_are_bounded() -> None:
    health = HealthStatus()
    enc = hpack.Encoder()
    limit = 1 << 20
    with h2_serving(
        {"/t.Echo/Stream": Echo}, health, max_message_bytes=limit, max_buffered_bytes=2 * limit
    ) as (srv, _):
        head = b"\x00" + limit.to_bytes(4, "big")  # a 1 MiB message, never completed
        part = head + b"x" * (limit - 100)
        data = b"".join(
            frame(HEADERS, 0x4, 2 * i + 1, enc.encode(REQUEST)) + frame(DATA, 0, 2 * i + 1, part)
            for i in range(3)
        )
        frames = exchange(srv, data)
        trailers = {sid: hpack.Decoder().decode(p) for kind, _, sid, p in frames if kind == HEADERS}
        assert list(trailers) == [5]  # the third partial message is over the budget
        assert ("grpc-status", "8") in trailers[5]
        assert all(c.buffered <= 2 * limit for c in srv._connections)
