"""A property test of router/h2grpc.py's frame layer: random sequences of HTTP/2 frames (valid
requests, gRPC messages, SETTINGS with edge values, window updates, resets, pings, raw garbage
of every frame type), cut into random reads, never make an exception escape the connection or
reach its catch-all (`internal_errors` stays 0), and every buffer the connection holds stays
under its stated bound after every read.

The connection is driven through `data_received` with FakeTransport, an in-memory stand-in for
the socket, so that hypothesis can run hundreds of sequences in seconds; the socket path itself
is tested with real peers in test_router_h2errors.py, test_router_h2spec.py and
test_router_h2grpc.py."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator

import hpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router import h2grpc
from router.h2grpc import HEALTH_CHECK, HEALTH_WATCH, H2GrpcServer, HealthStatus

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
PATHS = ["/t.Echo/Stream", HEALTH_CHECK, HEALTH_WATCH, "/not.Served/X", ""]
SIDS = [0, 1, 2, 3, 5, 7, 9, 11, 0x7FFFFFFF]
EDGE_VALUES = [0, 1, 16383, 16384, 65535, 1 << 20, (1 << 24) - 1, 1 << 24, (1 << 31) - 1, 1 << 31,
               0xFFFFFFFF]  # fmt: skip


class Once:
    """A stream handler answering each message once and ending after the third."""

    def __init__(self) -> None:
        self.n = 0

    def on_message(self, data: bytes) -> list[bytes]:
        self.n += 1
        return [data[:64]]

    @property
    def finished(self) -> bool:
        return self.n >= 3


class FakeTransport:
    """In-memory stand-in for the socket: counts what the connection writes."""

    def __init__(self) -> None:
        self.written = 0
        self.closed = False
        self.reading = True

    def write(self, data: bytes) -> None:
        self.written += len(data)

    def close(self) -> None:
        self.closed = True

    abort = close

    def is_closing(self) -> bool:
        return self.closed

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        pass

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def frame(kind: int, flags: int, sid: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + sid.to_bytes(4, "big") + payload


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    """One connection's input: the preface (almost always) and up to 40 frames."""
    enc = hpack.Encoder()
    out = [PREFACE if draw(st.integers(0, 19)) else draw(st.binary(max_size=30))]
    for _ in range(draw(st.integers(0, 40))):
        kind = draw(st.integers(0, 10))
        sid = draw(st.sampled_from(SIDS))
        flags = draw(st.sampled_from([0, 0x1, 0x4, 0x5, 0x8, 0xC, 0x20, 0x25, 0xFF]))
        shape = draw(st.integers(0, 3))
        if shape == 0:  # anything at all
            payload = draw(st.binary(max_size=48))
        elif kind == 1:  # a request, well-formed or nearly
            path = draw(st.sampled_from(PATHS))
            headers = [(":method", "POST"), (":scheme", "http"), (":path", path),
                       ("content-type", "application/grpc"), ("te", "trailers")]  # fmt: skip
            if draw(st.booleans()):
                headers.append(draw(st.sampled_from([("Upper", "x"), (":bad", "x"),
                                                     ("connection", "x"), ("content-length", "7"),
                                                     ("x-big", "v" * 3000)])))  # fmt: skip
            payload = enc.encode(headers)
            if flags & 0x8:
                payload = bytes((draw(st.integers(0, 255)),)) + payload
            if flags & 0x20:
                payload = draw(st.binary(min_size=5, max_size=5)) + payload
        elif kind == 0:  # gRPC messages, whole or cut
            msg = draw(st.binary(max_size=40))
            payload = (
                b"\x00"
                + draw(st.sampled_from([len(msg), 1 << 20, 0xFFFFFFFF])).to_bytes(4, "big")
                + msg
            )
            if draw(st.booleans()):
                payload = payload[: draw(st.integers(0, len(payload)))]
        elif kind == 4:
            pairs = draw(st.lists(st.tuples(st.integers(0, 8), st.sampled_from(EDGE_VALUES)),
                                  max_size=4))  # fmt: skip
            payload = b"".join(struct.pack(">HI", k, v & 0xFFFFFFFF) for k, v in pairs)
        elif kind in (3, 8):  # RST_STREAM code, WINDOW_UPDATE increment
            payload = draw(st.sampled_from(EDGE_VALUES)).to_bytes(4, "big")
        elif kind == 6:
            payload = draw(st.binary(min_size=8, max_size=8))
        elif kind == 9:
            payload = enc.encode([("x-c", "1")])
        else:
            payload = draw(st.binary(max_size=8))
        out.append(frame(kind, flags, sid, payload))
    return b"".join(out)


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def _check_bounds(conn: h2grpc._Connection, srv: H2GrpcServer) -> None:
    assert srv.internal_errors == 0
    assert len(conn.streams) <= srv.max_concurrent_streams
    assert conn.buffered == sum(len(s.buf) for s in conn.streams.values())
    assert conn.buffered <= srv.max_buffered_bytes
    assert conn.pending_bytes == sum(len(s.pending) for s in conn.streams.values())
    assert conn.pending_bytes <= srv.max_pending_bytes
    assert len(conn.closed) <= h2grpc._CLOSED_MEMORY
    assert len(conn.decoder._cache) <= 256
    assert conn.header_block is None or len(conn.header_block) <= h2grpc._MAX_HEADER_BLOCK
    assert len(conn.buf) <= 9 + h2grpc._OUR_MAX_FRAME
    assert 0 <= conn.reset_credit <= h2grpc._RESET_BUDGET


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=frames(), cuts=st.lists(st.integers(1, 64), max_size=8))
def test_random_frame_sequences_never_escape_and_stay_bounded(
    loop: asyncio.AbstractEventLoop, data: bytes, cuts: list[int]
) -> None:
    health = HealthStatus()
    health.set("", 1)
    srv = H2GrpcServer(
        {"/t.Echo/Stream": Once},
        health,
        max_message_bytes=1 << 16,
        max_concurrent_streams=4,
        max_buffered_bytes=1 << 17,
        max_pending_bytes=1 << 17,
    )

    async def feed() -> FakeTransport:
        conn = h2grpc._Connection(srv)
        transport = FakeTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        pos = 0
        for n in [*cuts, len(data)]:
            if pos >= len(data) or transport.closed:
                break
            conn.data_received(data[pos : pos + n])
            pos += n
            _check_bounds(conn, srv)
            health.set("", 1 + pos % 2)  # Watch streams get news between reads
            _check_bounds(conn, srv)
        if conn.lingering is not None:
            conn.lingering.cancel()
        conn.connection_lost(None)
        return transport

    transport = loop.run_until_complete(feed())
    # answers are bounded by what came in: no input makes the server write without end
    assert transport.written <= 8 * len(data) + 4096
