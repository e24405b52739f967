"""router/h2grpc.py's bounds over all connections, in raw frames over TCP: partial gRPC
messages and frames held over every connection (server.max_bodies_bytes), connections served
at once (server.max_connections, the idle ones making room) and the client preface's time.

Before these bounds, 8 connections that each began 15 messages of 4 MiB took the picker from
55 to 641 MiB of RSS (each connection alone held 64 MiB at most, 128 MiB with the shipped
64 MiB messages: eight such connections pass the Deployment's 1 GiB limit), and connections
that sent nothing were kept for ever (5,000 held)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import hpack

from router.h2grpc import H2GrpcServer, HealthStatus
from tests.router.conftest import h2_serving
from tests.router.test_router_h2errors import (
    DATA,
    GOAWAY,
    HEADERS,
    PREFACE,
    PROTOCOL_ERROR,
    REQUEST,
    SETTINGS,
    WINDOW,
    frame,
    goaway_code,
    read_frames,
    settings,
)
from tests.router.test_router_h2grpc import Echo, _grpc_frame

Frames = list[tuple[int, int, int, bytes]]
MIB = 1 << 20
OPEN_WINDOWS = settings((0x4, 0x7FFFFFFF)) + frame(
    WINDOW, 0, 0, (0x7FFFFFFF - 65535).to_bytes(4, "big")
)
"""The client's windows opened (stream and connection) so that Echo's answers go out whole."""


def _until(cond: Callable[[], bool], what: str) -> None:
    for _ in range(400):
        if cond():
            return
        time.sleep(0.025)
    raise AssertionError(what)


def _frames(sock: socket.socket, limit: float = 10.0, end_of: int | None = None) -> Frames:
    """The server's frames until it closes the connection, or ends stream `end_of` (its
    trailers: HEADERS with END_STREAM), or `limit` seconds pass."""
    sock.settimeout(limit)
    if end_of is None:
        return read_frames(sock)
    return read_frames(sock, lambda f: f[0] == HEADERS and bool(f[1] & 0x1) and f[2] == end_of)


def _trailers(frames: Frames) -> dict[int, list[tuple[str, str]]]:
    dec = hpack.Decoder()
    return {
        sid: [(str(k), str(v)) for k, v in dec.decode(p)]
        for kind, _, sid, p in frames
        if kind == HEADERS
    }


@contextmanager
def _serving(**kw: object) -> Iterator[H2GrpcServer]:
    health = HealthStatus()
    health.set("", 1)
    with h2_serving({"/t.Echo/Stream": Echo}, health, **kw) as (srv, _):  # type: ignore[arg-type]
        yield srv


def _connect(srv: H2GrpcServer, data: bytes = b"") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(PREFACE + settings() + data)
    return s


def _partial(length: int, sent: int, sid: int = 1) -> bytes:
    """A stream that begins a gRPC message of `length` bytes and sends `sent` of them."""
    body = b"\x00" + length.to_bytes(4, "big") + b"x" * sent
    out = frame(HEADERS, 0x4, sid, hpack.Encoder().encode(REQUEST))
    for off in range(0, len(body), 512 << 10):  # frames within the server's 1 MiB
        out += frame(DATA, 0, sid, body[off : off + (512 << 10)])
    return out


def test_partial_messages_over_all_connections_are_bounded() -> None:
    with _serving(max_buffered_total=3 * MIB) as srv:
        first = _connect(srv, _partial(4 * MIB, 2 * MIB - 100))
        try:
            _until(lambda: srv.buffered_total >= 2 * MIB - 100, "the first message is held")
            second = _connect(srv, frame(HEADERS, 0x4, 1, hpack.Encoder().encode(REQUEST)))
            with second:
                # whole 16 KiB frames, one at a time: no partial frame, only the message
                chunk = b"x" * (16 << 10)
                second.sendall(frame(DATA, 0, 1, b"\x00" + (4 * MIB).to_bytes(4, "big")))
                refused = False
                for _ in range(160):
                    try:
                        second.sendall(frame(DATA, 0, 1, chunk))
                    except OSError:
                        break
                    time.sleep(0.002)
                    if srv.late_messages or not srv._connections:
                        break
                second.shutdown(socket.SHUT_WR)
                trailers = _trailers(_frames(second))
                refused = ("grpc-status", "8") in trailers.get(1, [])
            assert refused  # RESOURCE_EXHAUSTED
            assert "over all connections" in dict(trailers[1])["grpc-message"]
            assert srv.buffered_total <= 3 * MIB
        finally:
            first.close()
        _until(lambda: srv.buffered_total == 0, "the first message's bytes are given back")
        assert srv.internal_errors == 0


def test_a_partial_frame_past_the_bound_pauses_its_connection_until_bytes_return() -> None:
    """Partial frames (up to 1 MiB each) count too. One that takes the server past its
    bound, beside another connection's bytes, stops the server reading that connection (the
    peer's sends block) until the other's bytes return; then its request is served."""
    with _serving(max_buffered_total=MIB + MIB // 2) as srv:
        first = _connect(srv, _partial(4 * MIB, MIB - 100))
        try:
            _until(lambda: srv.buffered_total >= MIB - 100, "the first message is held")
            msg = _grpc_frame(b"m" * (MIB - 64))
            data = frame(DATA, 0x1, 1, msg)  # one whole message in one frame, END_STREAM
            request = OPEN_WINDOWS + frame(HEADERS, 0x4, 1, hpack.Encoder().encode(REQUEST))
            second = _connect(srv, request)
            second.sendall(data[: 900 << 10])  # the frame's first 900 KiB: a partial frame
            _until(lambda: srv.paused_reads == 1, "the second connection is paused")
            second.sendall(data[900 << 10 :])  # the rest waits in the kernel
            time.sleep(0.2)
            assert srv.paused_reads == 1
            assert all(c.buffered == 0 for c in srv._connections if c.paused_for_total)
        finally:
            first.close()  # its bytes return: the second is read again and served
        with second:
            frames = _frames(second, end_of=1)
        assert ("grpc-status", "0") in _trailers(frames)[1]
        _until(lambda: srv.buffered_total == 0, "all given back")


def test_a_message_that_never_ends_is_refused_after_the_message_timeout() -> None:
    with _serving(message_timeout=0.5) as srv:
        with _connect(srv, _partial(4 * MIB, 1000)) as s:
            trailers = _trailers(_frames(s, end_of=1))
        assert ("grpc-status", "8") in trailers[1]
        assert "did not arrive whole within 0.5 s" in dict(trailers[1])["grpc-message"]
        assert srv.late_messages == 1
        _until(lambda: srv.buffered_total == 0, "its bytes are given back")


def test_a_message_alone_always_fits() -> None:
    """The bound refuses a stream only beside other connections' bytes: a 2 MiB message on
    an idle server with a 1 MiB bound is echoed."""
    with _serving(max_buffered_total=MIB) as srv:
        msg = b"y" * (2 * MIB)
        whole = _grpc_frame(msg)
        data = OPEN_WINDOWS + frame(HEADERS, 0x4, 1, hpack.Encoder().encode(REQUEST))
        for off in range(0, len(whole), 512 << 10):  # in four DATA frames
            last = off + (512 << 10) >= len(whole)
            data += frame(DATA, 0x1 if last else 0, 1, whole[off : off + (512 << 10)])
        with _connect(srv, data) as s:
            frames = _frames(s, end_of=1)
        echoed = sum(len(p) for kind, _, sid, p in frames if kind == DATA and sid == 1)
        assert echoed >= 2 * (len(msg) + 5)  # Echo answers each message twice
        assert ("grpc-status", "0") in _trailers(frames)[1]


def test_at_the_connection_limit_the_longest_idle_makes_room() -> None:
    with _serving(max_connections=2) as srv:
        oldest = _connect(srv)
        _until(lambda: srv.served == 1, "the first is served")
        newer = _connect(srv)
        _until(lambda: srv.served == 2, "the second is served")
        third = _connect(srv)
        try:
            frames = _frames(oldest)  # GOAWAY NO_ERROR, then closed
            assert goaway_code(frames) == 0
            assert srv.evicted_connections == 1
            _until(lambda: srv.served == 2, "the third took its place")
            kinds = [f[0] for f in _frames(newer, limit=0.3)]  # what came in 0.3 s
            assert kinds[:1] == [SETTINGS] and GOAWAY not in kinds  # still served
        finally:
            for s in (oldest, newer, third):
                s.close()


def test_with_none_idle_a_new_connection_gets_goaway_and_no_stream_is_lost() -> None:
    with _serving(max_connections=1) as srv:
        # a stream in progress: the connection is busy, not idle
        busy = _connect(srv, frame(HEADERS, 0x4, 1, hpack.Encoder().encode(REQUEST)))
        try:
            _until(lambda: srv.served == 1 and not srv._idle, "the busy one is served")
            with _connect(srv, frame(HEADERS, 0x5, 1, hpack.Encoder().encode(REQUEST))) as s:
                frames = _frames(s)
            goaways = [p for kind, _, _, p in frames if kind == GOAWAY]
            assert goaways and int.from_bytes(goaways[0][4:8], "big") == 0  # NO_ERROR
            assert int.from_bytes(goaways[0][:4], "big") == 0  # no stream taken: retry
            assert not [f for f in frames if f[0] == HEADERS]  # its request was not served
            assert srv.refused_connections == 1
        finally:
            busy.close()
        _until(lambda: srv.served == 0, "the busy one is gone")


def test_a_connection_without_a_preface_is_closed() -> None:
    with _serving(preface_timeout=0.5) as srv:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            frames = _frames(s)
        assert goaway_code(frames) == PROTOCOL_ERROR
        _until(lambda: srv.served == 0, "not counted any more")
