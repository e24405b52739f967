"""The picker's gRPC server: gRPC over HTTP/2 on one asyncio event loop, written for the
ext_proc traffic pattern instead of grpcio's general server.

Why: with grpcio (asyncio or thread-pool) one ext_proc stream (2 messages in, 2 out) costs
about 1.1-1.4 ms of CPU in CPython, nearly all of it grpcio's own per-stream and
per-message machinery, while the decision itself is ~0.05-0.1 ms; that caps one core near
650-900 streams/s and puts the queueing in every request's latency. Here a stream costs
the frame parsing, the protobuf (de)serialisation and the picker: every message is handled
synchronously in the protocol's `data_received`, and everything a read produced goes out in
one socket write.

What it implements (RFC 9113 and gRPC's PROTOCOL-HTTP2): the connection preface, SETTINGS
(peer INITIAL_WINDOW_SIZE and MAX_FRAME_SIZE honoured; ours advertise large windows, so
64 MiB bodies arrive without stalls), HEADERS + CONTINUATION with an HPACK decoder (static
and dynamic tables; Huffman strings through the `hpack` package's decoder), DATA with
padding, flow control both ways (outgoing data waits for the peer's WINDOW_UPDATE), PING,
RST_STREAM, GOAWAY (at stop a graceful one: the streams in flight get a grace period to
finish, new ones are refused with REFUSED_STREAM); gRPC's length-prefixed messages
(compressed ones are refused with UNIMPLEMENTED: Envoy does not compress ext_proc),
`max_message_bytes` (RESOURCE_EXHAUSTED), trailers-only errors. Methods: a bidirectional
stream handler per path (ext_proc's Process), and `grpc.health.v1.Health` Check and Watch
over `HealthStatus`. TLS is the event loop's (ALPN h2).

Bounds per connection (the constants below) and over all of them (`H2GrpcServer`: partial
messages and frames held, `max_buffered_total`; connections served, `max_connections`, the
one idle longest making room; `message_timeout`; `preface_timeout`); docs/router.md lists
each with the attack it answers.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
import urllib.parse
from collections.abc import Callable
from typing import Protocol, cast

from grpc_health.v1 import health_pb2
from hpack.huffman_table import decode_huffman
from hpack.table import HeaderTable

from router.h2request import MalformedRequest, check_trailers, request_fields

__all__ = [
    "H2GrpcServer",
    "HealthStatus",
    "MessageStream",
    "StreamFactory",
    "GrpcError",
    "HPACKDecoder",
    "HPACKError",
    "HEALTH_CHECK",
    "HEALTH_WATCH",
    "INVALID_ARGUMENT",
    "server_tls",
]

log = logging.getLogger("kvspread.router.h2grpc")

HEALTH_CHECK = "/grpc.health.v1.Health/Check"
HEALTH_WATCH = "/grpc.health.v1.Health/Watch"

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _PRIORITY, _RST, _SETTINGS, _PUSH, _PING, _GOAWAY, _WINDOW, _CONT = range(10)
_END_STREAM, _ACK, _END_HEADERS, _PADDED, _PRIO_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
_SELF_DEPENDENT = 0x100  # not on the wire: HEADERS whose priority names its own stream
_MAX_WINDOW = (1 << 31) - 1
_OUR_MAX_FRAME = 1 << 20  # what we accept per frame (SETTINGS_MAX_FRAME_SIZE)
# The limits below are defences against the known HTTP/2 attacks; docs/router.md lists them.
# SETTINGS_MAX_HEADER_LIST_SIZE (RFC 7541 sizes: name + value + 32 a field): a decoded block
# past it is refused with RESOURCE_EXHAUSTED, whatever the HPACK references expand to (bombs)
_MAX_HEADER_LIST = 64 << 10
_MAX_HEADER_BLOCK = 2 * _MAX_HEADER_LIST  # encoded HEADERS + CONTINUATION: ENHANCE_YOUR_CALM
_MAX_CONTINUATIONS = 64  # CONTINUATION frames a block: empty ones cost CPU but no bytes
_RESET_BUDGET = 1000  # streams the peer resets before their answer, less the answered ones
_CLOSED_MEMORY = 4096  # closed streams remembered to tell late frames from a broken peer
_WRITE_HIGH = 1 << 20  # output unwritten past this: stop reading the peer until it drains
_VIEW_FROM = 1 << 20  # messages from this size are handed on as views, not copied
_REFILL = 1 << 30  # give the peer its window back once this much arrived
# After an error GOAWAY the write side is shut (FIN) and what the peer still sends is read and
# dropped for this long before the close: closing with unread input makes the kernel answer with
# a RST, which can destroy the GOAWAY before the peer has read it (RFC 9113 section 5.4.1 asks
# the endpoint to send GOAWAY before closing).
_LINGER_S = 2.0
_CLOSE_WAIT_S = 1.0  # at stop, for the listening server's transports once all are cut
_FRAME = struct.Struct(">IBI")  # (length << 8 | type), flags, stream id
_MESSAGE_PREFIX = struct.Struct(">BI")  # gRPC: compressed flag, message length

# HTTP/2 error codes (RFC 9113 section 7)
_PROTOCOL_ERROR, _INTERNAL_ERROR, _FLOW_CONTROL_ERROR, _STREAM_CLOSED = 0x1, 0x2, 0x3, 0x5
_FRAME_SIZE_ERROR, _COMPRESSION_ERROR, _ENHANCE_YOUR_CALM = 0x6, 0x9, 0xB
_REFUSED_STREAM = 0x7  # RST_STREAM code: the stream was not processed, safe to retry

# gRPC status codes used here
OK, INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL = 0, 3, 5, 8, 12, 13


class GrpcError(Exception):
    """Ends a stream with a gRPC status other than OK."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class HPACKError(ValueError):
    """The peer's header block cannot be decoded (a connection error)."""


class HeaderListTooLarge(HPACKError):
    """The block decoded (the table follows it) to more than the header list limit: the
    stream is refused, the connection goes on."""


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return _FRAME.pack(len(payload) << 8 | kind, flags, stream) + payload


def _hpack_int(value: int, prefix_bits: int, first: int) -> bytes:
    """HPACK integer with `first` holding the bits above the prefix."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _literal(name: bytes, value: bytes) -> bytes:
    """A literal header field without indexing, new name, no Huffman (RFC 7541 6.2.2)."""
    return b"\x00" + _hpack_int(len(name), 7, 0) + name + _hpack_int(len(value), 7, 0) + value


# ":status: 200" is static entry 8; content-type is static name 31
_RESPONSE_HEADERS = b"\x88" + b"\x0f\x10" + _hpack_int(16, 7, 0) + b"application/grpc"


def _trailers(code: int, message: str = "") -> bytes:
    block = _literal(b"grpc-status", str(code).encode())
    if message:
        quoted = urllib.parse.quote(message, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")
        block += _literal(b"grpc-message", quoted.encode())
    return block


_OK_TRAILERS = _trailers(OK)


class HPACKDecoder:
    """RFC 7541 decoding with the dynamic table; one per connection, every header block in
    order. A block of indexed fields and literals without indexing (what Envoy sends once
    its table is warm: the same ext_proc headers on every stream, some of them never
    indexed) leaves the table as it was, so its decoding is cached by the block's bytes;
    a block that changes the table (an incremental literal, a size update) empties the
    cache, whose entries may then mean other headers."""

    def __init__(self, max_table_size: int = 4096, max_list_size: int = 1 << 30) -> None:
        self._static = HeaderTable.STATIC_TABLE
        self._max_list = max_list_size
        self._dynamic: list[tuple[bytes, bytes]] = []  # newest first
        self._size = 0
        self._max = max_table_size
        self._limit = max_table_size
        self._cache: dict[bytes, list[tuple[bytes, bytes]]] = {}

    def _entry(self, index: int) -> tuple[bytes, bytes]:
        if index <= 0:
            raise HPACKError("header index 0")
        if index <= len(self._static):
            return self._static[index - 1]
        try:
            return self._dynamic[index - len(self._static) - 1]
        except IndexError:
            raise HPACKError(f"header index {index} past the tables") from None

    def _add(self, name: bytes, value: bytes) -> None:
        size = len(name) + len(value) + 32
        self._dynamic.insert(0, (name, value))
        self._size += size
        self._evict()

    def _evict(self) -> None:
        while self._size > self._max and self._dynamic:
            n, v = self._dynamic.pop()
            self._size -= len(n) + len(v) + 32

    @staticmethod
    def _int(data: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
        limit = (1 << prefix_bits) - 1
        value = data[pos] & limit
        pos += 1
        if value < limit:
            return value, pos
        shift = 0
        while True:
            if pos >= len(data) or shift > 28:
                raise HPACKError("truncated or oversized integer")
            b = data[pos]
            pos += 1
            value += (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value, pos

    def _string(self, data: bytes, pos: int) -> tuple[bytes, int]:
        if pos >= len(data):
            raise HPACKError("truncated string")
        huffman = data[pos] & 0x80
        length, pos = self._int(data, pos, 7)
        end = pos + length
        if end > len(data):
            raise HPACKError("truncated string")
        raw = data[pos:end]
        if huffman:
            try:
                raw = decode_huffman(raw)
            except Exception as exc:  # noqa: BLE001 - hpack raises its own error types
                raise HPACKError(f"bad Huffman string: {exc}") from exc
        return raw, end

    def decode(self, data: bytes) -> list[tuple[bytes, bytes]]:
        cached = self._cache.get(data)
        if cached is not None:
            return cached
        out: list[tuple[bytes, bytes]] = []
        pos, n = 0, len(data)
        table_unchanged = True
        fields = 0
        size = 0  # the decoded list's size (RFC 7541 section 4.1)
        limit = self._max_list
        try:
            while pos < n:
                b = data[pos]
                if b & 0x80:  # indexed field
                    index, pos = self._int(data, pos, 7)
                    entry = self._entry(index)
                    fields += 1
                    size += len(entry[0]) + len(entry[1]) + 32
                    if size <= limit:  # past it: decoded on for the table, not kept
                        out.append(entry)
                    continue
                if b & 0x40:  # literal with incremental indexing
                    table_unchanged = False
                    index, pos = self._int(data, pos, 6)
                    index_name = True
                elif b & 0x20:  # dynamic table size update
                    table_unchanged = False
                    if fields:  # RFC 7541 section 4.2: only at the start of a block
                        raise HPACKError("table size update after a header field")
                    new_max, pos = self._int(data, pos, 5)
                    if new_max > self._limit:
                        raise HPACKError(f"table size {new_max} over the limit {self._limit}")
                    self._max = new_max
                    self._evict()
                    continue
                else:  # literal without indexing / never indexed
                    index, pos = self._int(data, pos, 4)
                    index_name = False
                if index:
                    name = self._entry(index)[0]
                else:
                    name, pos = self._string(data, pos)
                value, pos = self._string(data, pos)
                fields += 1
                size += len(name) + len(value) + 32
                if size <= limit:
                    out.append((name, value))
                if index_name:
                    self._add(name, value)
        except IndexError:
            raise HPACKError("truncated header block") from None
        if size > limit:
            if not table_unchanged:
                self._cache.clear()
            raise HeaderListTooLarge(f"header list of {size} bytes over the limit {limit}")
        if table_unchanged:
            # bounded: at most 256 blocks of up to 1 KiB decoding to up to 8 KiB each
            if len(data) <= 1024 and size <= 8192:
                if len(self._cache) >= 256:
                    self._cache.clear()
                self._cache[data] = out
        else:
            self._cache.clear()  # the table moved: cached blocks may mean other headers now
        return out


class MessageStream(Protocol):
    """A bidirectional stream's handler: each request message in, the answers out."""

    def on_message(self, data: bytes | memoryview) -> list[bytes]:
        """Serialised answers to send now. Raise GrpcError to end with that status. A
        large message (1 MiB and more) comes as a read-only view of a buffer that is never
        reused: kept, it keeps that buffer; not kept, the buffer goes with it."""
        ...

    @property
    def finished(self) -> bool:
        """True once the handler has said its last word (the stream ends with OK)."""
        ...


StreamFactory = Callable[[], MessageStream]


class HealthStatus:
    """`grpc.health.v1` statuses by service name, with the Watch streams to tell."""

    def __init__(self) -> None:
        self._status: dict[str, int] = {}
        self._watchers: dict[str, list[Callable[[int], None]]] = {}

    def set(self, service: str, status: int) -> None:
        if self._status.get(service) == status:
            return
        self._status[service] = status
        for tell in list(self._watchers.get(service, ())):
            tell(status)

    def get(self, service: str) -> int | None:
        return self._status.get(service)

    def watch(self, service: str, tell: Callable[[int], None]) -> Callable[[], None]:
        """Subscribe; returns the unsubscribe function."""
        self._watchers.setdefault(service, []).append(tell)

        def cancel() -> None:
            lst = self._watchers.get(service, [])
            if tell in lst:
                lst.remove(tell)

        return cancel


class _Stream:
    __slots__ = (
        "sid",
        "path",
        "handler",
        "buf",
        "counted",
        "send_window",
        "pending",
        "trailers",
        "headers_sent",
        "closed",
        "remote_done",
        "expect",
        "body",
        "received",
        "cancel",
        "messages",
    )

    def __init__(self, sid: int, path: str, send_window: int) -> None:
        self.sid = sid
        self.path = path
        self.handler: MessageStream | None = None
        self.buf = bytearray()
        self.counted = 0  # bytes of `buf` in the connection's `buffered`
        self.send_window = send_window
        self.pending = bytearray()  # DATA payload waiting for flow-control window
        self.trailers: bytes | None = None  # sent once `pending` is out
        self.headers_sent = False
        self.closed = False  # our half ended (or the stream reset)
        self.remote_done = False  # the peer's END_STREAM arrived: half-closed (remote)
        self.expect: int | None = None  # the request's content-length
        self.body = 0  # DATA bytes (padding excluded), checked against `expect`
        self.received = 0  # bytes since the last stream WINDOW_UPDATE
        self.cancel: Callable[[], None] | None = None
        self.messages: list[bytes] = []  # unary: the request message


def _close_handler(s: _Stream) -> None:
    """Tell a handler with a `close()` (one that holds resources) that its stream ended."""
    close = getattr(s.handler, "close", None)
    if close is not None:
        close()


def _unpad(payload: bytes, fixed: int) -> bytes:
    """A PADDED frame's payload without its Pad Length byte and padding (RFC 9113 6.1/6.2);
    `fixed` bytes (HEADERS' priority fields) must fit besides the padding."""
    if not payload:
        raise _ConnectionError(_FRAME_SIZE_ERROR, "padded frame without a Pad Length")
    pad = payload[0]
    if pad + fixed > len(payload) - 1:
        raise _ProtocolError(f"padding of {pad} bytes fills the frame")
    return payload[1 : len(payload) - pad]


class _Connection(asyncio.Protocol):
    def __init__(self, server: H2GrpcServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.preface = False
        self.out: list[bytes] = []
        self.streams: dict[int, _Stream] = {}
        self.blocked: dict[int, _Stream] = {}  # streams with data waiting for a window
        # streams no longer in `streams`, newest last, at most _CLOSED_MEMORY: True where this
        # side ended or reset it (the peer's frames may still be in flight: ignored), False
        # where both halves ended (a peer's DATA or HEADERS there is a STREAM_CLOSED error)
        self.closed: dict[int, bool] = {}
        self.decoder = HPACKDecoder(max_list_size=_MAX_HEADER_LIST)
        self.peer_window = 65535  # connection send window
        self.peer_initial = 65535  # stream send window
        self.peer_max_frame = 16384
        self.received = 0
        self.buffered = 0  # bytes of partial messages held over all streams
        self.pending_bytes = 0  # answers held for the peer's flow-control window
        self.reset_credit = _RESET_BUDGET  # rapid-reset defence (CVE-2023-44487)
        self.header_block: bytearray | None = None
        self.header_stream = 0
        self.header_flags = 0
        self.continuations = 0
        self.last_stream = 0  # the last stream taken (GOAWAY names it)
        self.highest = 0  # the highest stream id the peer used (taken or refused)
        self.checked: tuple[object, tuple[str, int | None]] | None = None
        self.in_callback = False
        self.draining = False  # GOAWAY sent: no new streams, close after the last one
        self.lingering: asyncio.TimerHandle | None = None  # error GOAWAY sent: drop input
        self.held = 0  # bytes of this connection counted in the server's `buffered_total`
        self.paused_for_total = False  # reading paused: the server's total is over its bound
        self.served = False  # counted in the server's `served` (max_connections)
        self.preface_timer: asyncio.TimerHandle | None = None

    # --- asyncio --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        # floods of frames we must answer (PING, SETTINGS, frames that make us reset a
        # stream) and slow readers: reading stops while this much output waits unwritten
        self.transport.set_write_buffer_limits(high=_WRITE_HIGH)
        server = self.server
        server._connections.add(self)
        admitted = server._admit(self)
        settings = struct.pack(
            ">HIHIHIHIHI",
            0x2, 0,  # no push
            0x3, self.server.max_concurrent_streams,
            0x4, _MAX_WINDOW,
            0x5, _OUR_MAX_FRAME,
            0x6, _MAX_HEADER_LIST,
        )  # fmt: skip
        self.out.append(_frame(_SETTINGS, 0, 0, settings))
        self.out.append(_frame(_WINDOW, 0, 0, struct.pack(">I", _MAX_WINDOW - 65535)))
        if not admitted:
            server.refused_connections += 1
            self._goaway(0, f"the server serves {server.max_connections} connections, its limit")
            return
        self._flush()
        self.preface_timer = asyncio.get_running_loop().call_later(
            server.preface_timeout, self._preface_late
        )

    def _preface_late(self) -> None:
        self.preface_timer = None
        if not self.preface and self.transport is not None:
            self.server.connection_errors += 1
            self._goaway(_PROTOCOL_ERROR, "no connection preface in time")

    def _account(self) -> None:
        """Count this connection's partial frame and partial messages in the server's
        `buffered_total`; what it gives back may let paused connections read again."""
        now = len(self.buf) + self.buffered if self.transport is not None else 0
        server = self.server
        server.buffered_total += now - self.held
        gave_back = now < self.held
        self.held = now
        if gave_back and server._paused and server.buffered_total <= server.max_buffered_total:
            server._resume_paused()

    def resume_reading_for_total(self) -> None:
        """The server's total is under its bound again: read again, unless output waits."""
        self.paused_for_total = False
        t = self.transport
        if t is not None and self.lingering is None and t.get_write_buffer_size() <= _WRITE_HIGH:
            t.resume_reading()

    def _unserve(self) -> None:
        """No longer one of the `max_connections` served (closing, draining or gone)."""
        if self.served:
            self.served = False
            self.server.served -= 1
        self.server._idle.pop(self, None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server._connection_gone(self)
        self._unserve()
        self.server._paused.pop(self, None)
        for sid in self.streams:
            self.server._partials.pop((self, sid), None)
        if self.preface_timer is not None:
            self.preface_timer.cancel()
        if self.lingering is not None:
            self.lingering.cancel()
        for s in self.streams.values():
            if s.cancel is not None:
                s.cancel()
            _close_handler(s)
        self.streams.clear()
        self.blocked.clear()
        self.transport = None
        self._account()

    def pause_writing(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and self.lingering is None and not self.paused_for_total:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.lingering is not None:
            return  # after an error GOAWAY: read and dropped (bounded by _LINGER_S)
        self.in_callback = True
        try:
            self._receive(data)
        except (_ConnectionError, HPACKError) as exc:
            code = exc.code if isinstance(exc, _ConnectionError) else _COMPRESSION_ERROR
            self.server.connection_errors += 1
            log.info("closing an HTTP/2 connection", extra={"kv": {"why": str(exc), "code": code}})
            self._goaway(code, str(exc))
        except Exception as exc:  # noqa: BLE001 - a bug here ends this connection only
            self.server.internal_errors += 1
            log.error(
                "HTTP/2 connection failed",
                extra={"kv": {"error": f"{type(exc).__name__}: {exc}"}},
            )
            self._goaway(_INTERNAL_ERROR, "internal error")
        finally:
            self.in_callback = False
            self._flush()
            self._account()
            self._over_total()

    def _over_total(self) -> None:
        """A partial frame that takes the server's `buffered_total` past its bound, beside
        what other connections hold, pauses reading this connection (TCP pushes back on the
        peer) until the total is under the bound again: a frame cannot be refused in part,
        and ending the connection would end its other streams."""
        server = self.server
        if (
            self.buf
            and server.buffered_total > server.max_buffered_total
            and server.buffered_total > self.held
            and self.transport is not None
            and self.lingering is None
            and not self.paused_for_total
        ):
            self.paused_for_total = True
            server._paused[self] = None
            server.paused_reads += 1
            self.transport.pause_reading()

    # --- frames in ------------------------------------------------------------------
    def _receive(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        if not self.preface:
            if len(buf) < len(_PREFACE):
                if not _PREFACE.startswith(bytes(buf)):
                    raise _ProtocolError("not an HTTP/2 connection preface (gRPC needs h2c or h2)")
                return
            if bytes(buf[: len(_PREFACE)]) != _PREFACE:
                raise _ProtocolError("not an HTTP/2 connection preface (gRPC needs h2c or h2)")
            self.preface = True
            pos = len(_PREFACE)
        n = len(buf)
        while n - pos >= 9:
            head, flags, sid = _FRAME.unpack_from(buf, pos)
            length, kind = head >> 8, head & 0xFF
            if length > _OUR_MAX_FRAME:
                raise _ConnectionError(
                    _FRAME_SIZE_ERROR, f"frame of {length} bytes over our {_OUR_MAX_FRAME}"
                )
            end = pos + 9 + length
            if end > n:
                break
            with memoryview(buf) as view:  # one copy, not a bytearray slice and then bytes
                payload = bytes(view[pos + 9 : end])
            pos = end
            self._frame_in(kind, flags, sid & _MAX_WINDOW, payload)
            if self.transport is None or self.lingering is not None:
                return
        del buf[:pos]

    def _frame_in(self, kind: int, flags: int, sid: int, payload: bytes) -> None:
        if self.header_block is not None and (kind != _CONT or sid != self.header_stream):
            raise _ProtocolError("a header block was interrupted")
        if kind == _DATA:
            self._on_data(flags, sid, payload)
        elif kind == _HEADERS:
            self._on_headers_frame(flags, sid, payload)
        elif kind == _CONT:
            self._on_continuation(flags, sid, payload)
        elif kind == _WINDOW:
            self._on_window_update(sid, payload)
        elif kind == _RST:
            self._on_rst(sid, payload)
        elif kind == _SETTINGS:
            self._on_settings(flags, sid, payload)
        elif kind == _PING:
            if sid:
                raise _ProtocolError("PING on a stream")
            if len(payload) != 8:
                raise _ConnectionError(_FRAME_SIZE_ERROR, f"PING of {len(payload)} bytes, not 8")
            if not flags & _ACK:
                self.out.append(_frame(_PING, _ACK, 0, payload))
        elif kind == _PRIORITY:
            self._on_priority(sid, payload)
        elif kind == _GOAWAY:
            if sid:
                raise _ProtocolError("GOAWAY on a stream")
            if len(payload) < 8:
                raise _ConnectionError(_FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes")
            # the peer opens no new streams; the ones it has finish
        elif kind == _PUSH:
            raise _ProtocolError("PUSH_PROMISE from a client")
        # unknown frame types are ignored (RFC 9113 section 5.5)

    def _on_headers_frame(self, flags: int, sid: int, payload: bytes) -> None:
        if sid == 0:
            raise _ProtocolError("HEADERS on stream 0")
        if flags & _PADDED:
            payload = _unpad(payload, 5 if flags & _PRIO_FLAG else 0)
        if flags & _PRIO_FLAG:
            if len(payload) < 5:
                raise _ConnectionError(_FRAME_SIZE_ERROR, "HEADERS too short for its priority")
            if int.from_bytes(payload[:4], "big") & _MAX_WINDOW == sid:
                flags |= _SELF_DEPENDENT
            payload = payload[5:]
        if len(payload) > _MAX_HEADER_BLOCK:
            raise _ConnectionError(
                _ENHANCE_YOUR_CALM, f"header block over {_MAX_HEADER_BLOCK} bytes"
            )
        if flags & _END_HEADERS:
            self._on_headers(sid, flags, payload)
        else:
            self.header_block = bytearray(payload)
            self.header_stream, self.header_flags = sid, flags
            self.continuations = 0

    def _on_continuation(self, flags: int, sid: int, payload: bytes) -> None:
        if self.header_block is None:
            raise _ProtocolError("CONTINUATION without its HEADERS")
        self.header_block += payload
        self.continuations += 1
        if len(self.header_block) > _MAX_HEADER_BLOCK:
            raise _ConnectionError(
                _ENHANCE_YOUR_CALM, f"header block over {_MAX_HEADER_BLOCK} bytes"
            )
        if self.continuations > _MAX_CONTINUATIONS:
            raise _ConnectionError(
                _ENHANCE_YOUR_CALM, f"over {_MAX_CONTINUATIONS} CONTINUATION frames in a block"
            )
        if flags & _END_HEADERS:
            block, self.header_block = bytes(self.header_block), None
            self._on_headers(sid, self.header_flags, block)

    def _on_window_update(self, sid: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise _ConnectionError(
                _FRAME_SIZE_ERROR, f"WINDOW_UPDATE of {len(payload)} bytes, not 4"
            )
        inc = struct.unpack(">I", payload)[0] & _MAX_WINDOW
        if sid == 0:
            if inc == 0:
                raise _ProtocolError("connection WINDOW_UPDATE of 0")
            self.peer_window += inc
            if self.peer_window > _MAX_WINDOW:
                raise _ConnectionError(_FLOW_CONTROL_ERROR, "connection window over 2^31-1")
            for waiting in list(self.blocked.values()):
                self._send_pending(waiting)
            return
        s = self.streams.get(sid)
        if s is None:
            if sid > self.highest:
                raise _ProtocolError(f"WINDOW_UPDATE on idle stream {sid}")
            return  # a closed stream: it may arrive after the end (RFC 9113 section 6.9)
        if inc == 0:
            self._reset(sid, _PROTOCOL_ERROR)
            return
        s.send_window += inc
        if s.send_window > _MAX_WINDOW:
            self._reset(sid, _FLOW_CONTROL_ERROR)
            return
        self._send_pending(s)

    def _on_rst(self, sid: int, payload: bytes) -> None:
        if sid == 0:
            raise _ProtocolError("RST_STREAM on stream 0")
        if len(payload) != 4:
            raise _ConnectionError(_FRAME_SIZE_ERROR, f"RST_STREAM of {len(payload)} bytes, not 4")
        if sid > self.highest:
            raise _ProtocolError(f"RST_STREAM on idle stream {sid}")
        s = self.streams.get(sid)
        if s is not None and not s.closed:  # cancelled before its answer: costs credit
            self.reset_credit -= 1
            if self.reset_credit < 0:
                raise _ConnectionError(
                    _ENHANCE_YOUR_CALM,
                    f"over {_RESET_BUDGET} streams reset by the peer before their answers"
                    " (rapid reset)",
                )
        self._drop(sid, tolerate=False)

    def _on_priority(self, sid: int, payload: bytes) -> None:
        if sid == 0:
            raise _ProtocolError("PRIORITY on stream 0")
        if len(payload) != 5:
            self._reset(sid, _FRAME_SIZE_ERROR)
        elif int.from_bytes(payload[:4], "big") & _MAX_WINDOW == sid:
            self._reset(sid, _PROTOCOL_ERROR)  # a stream cannot depend on itself (5.3.1)
        # otherwise nothing to do: RFC 9113 deprecates the priority scheme

    def _on_settings(self, flags: int, sid: int, payload: bytes) -> None:
        if sid:
            raise _ProtocolError("SETTINGS on a stream")
        if flags & _ACK:
            if payload:
                raise _ConnectionError(_FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            return
        if len(payload) % 6:
            raise _ConnectionError(_FRAME_SIZE_ERROR, "SETTINGS not a multiple of 6 bytes")
        for i in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HI", payload, i)
            if key == 0x2 and value > 1:
                raise _ProtocolError(f"SETTINGS_ENABLE_PUSH {value}")
            if key == 0x4:
                if value > _MAX_WINDOW:
                    raise _ConnectionError(_FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE over 2^31-1")
                delta = value - self.peer_initial
                self.peer_initial = value
                for s in self.streams.values():
                    s.send_window += delta
                    if s.send_window > _MAX_WINDOW:
                        raise _ConnectionError(
                            _FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE takes a window over 2^31-1"
                        )
            elif key == 0x5:
                if not 16384 <= value <= 16777215:
                    raise _ProtocolError(f"SETTINGS_MAX_FRAME_SIZE {value} outside 2^14..2^24-1")
                self.peer_max_frame = value
        self.out.append(_frame(_SETTINGS, _ACK, 0))
        for s in list(self.blocked.values()):
            self._send_pending(s)

    def _request(self, headers: list[tuple[bytes, bytes]]) -> tuple[str, int | None]:
        """The request's path and content-length; the decoder hands the same list for the
        same block, so the last check is reused (Envoy repeats one block per stream)."""
        checked = self.checked
        if checked is not None and checked[0] is headers:
            return checked[1]
        fields = request_fields(headers)
        self.checked = (headers, fields)
        return fields

    def _on_headers(self, sid: int, flags: int, block: bytes) -> None:
        try:
            headers = self.decoder.decode(block)  # always: the table must follow every block
        except HeaderListTooLarge as exc:
            headers, too_large = [], str(exc)
        else:
            too_large = ""
        s = self.streams.get(sid)
        if s is not None:  # trailers from the client end its half
            if s.remote_done:
                self._reset(sid, _STREAM_CLOSED)
                return
            if not flags & _END_STREAM or too_large:
                self._reset(sid, _PROTOCOL_ERROR)  # a second block must end the stream
                return
            try:
                check_trailers(headers)
            except MalformedRequest:
                self._reset(sid, _PROTOCOL_ERROR)
                return
            self._end_of_input(s)
            return
        if sid <= self.highest:
            state = self.closed.get(sid)
            if state is None:
                raise _ProtocolError(f"stream id {sid} not above the last one, {self.highest}")
            if not state:
                raise _ConnectionError(_STREAM_CLOSED, f"HEADERS on closed stream {sid}")
            if flags & _END_STREAM:
                self.closed[sid] = False  # the peer's half of a stream we ended
            return
        if sid % 2 == 0:
            raise _ProtocolError(f"stream id {sid} cannot open a stream")
        self.highest = sid
        if self.draining:  # past our GOAWAY's last stream: the client may retry it elsewhere
            self._reset(sid, _REFUSED_STREAM)
            return
        if len(self.streams) >= self.server.max_concurrent_streams:
            self._reset(sid, _REFUSED_STREAM)  # RFC 9113 section 5.1.2
            return
        self.last_stream = sid
        if too_large:
            s = _Stream(sid, "", self.peer_initial)
            self._open(s)
            self._finish(s, RESOURCE_EXHAUSTED, too_large)
            return
        try:
            path, expect = self._request(headers)
        except MalformedRequest:
            self._reset(sid, _PROTOCOL_ERROR)
            return
        if flags & _SELF_DEPENDENT:
            self._reset(sid, _PROTOCOL_ERROR)
            return
        s = _Stream(sid, path, self.peer_initial)
        s.expect = expect
        self._open(s)
        factory = self.server.methods.get(path)
        if factory is not None:
            s.handler = factory()
        elif path == HEALTH_WATCH:
            pass  # answered once its request message is in
        elif path != HEALTH_CHECK:
            self._finish(s, UNIMPLEMENTED, f"method {path} is not served here")
            if flags & _END_STREAM:
                s.remote_done = True
            return
        if flags & _END_STREAM:
            self._end_of_input(s)

    def _on_data(self, flags: int, sid: int, payload: bytes) -> None:
        if sid == 0:
            raise _ProtocolError("DATA on stream 0")
        size = len(payload)
        self.received += size
        if self.received > _MAX_WINDOW:
            raise _ConnectionError(_FLOW_CONTROL_ERROR, "DATA past the connection window")
        if self.received >= _REFILL:
            self.out.append(_frame(_WINDOW, 0, 0, struct.pack(">I", self.received)))
            self.received = 0
        s = self.streams.get(sid)
        if s is None:
            if sid > self.highest:
                raise _ProtocolError(f"DATA on idle stream {sid}")
            if not self.closed.get(sid, False):
                self._reset(sid, _STREAM_CLOSED)  # both halves ended: nothing may follow
            return  # a stream this side ended or reset: the peer's data still counted above
        if s.remote_done:
            self._reset(sid, _STREAM_CLOSED)  # half-closed (remote): RFC 9113 section 5.1
            return
        if flags & _PADDED:
            payload = _unpad(payload, 0)
        s.received += size
        if s.received >= _REFILL:
            self.out.append(_frame(_WINDOW, 0, sid, struct.pack(">I", s.received)))
            s.received = 0
        s.body += len(payload)
        if s.expect is not None and s.body > s.expect:
            self._reset(sid, _PROTOCOL_ERROR)  # more DATA than content-length (8.1.1)
            return
        if s.closed:  # our answer is out (its trailers may wait for a window)
            if flags & _END_STREAM:
                s.remote_done = True
            return
        if not s.buf and len(payload) >= 5 and not payload[0]:
            # the usual frame: exactly one whole uncompressed message, no copy into s.buf
            length = int.from_bytes(payload[1:5], "big")
            if len(payload) == 5 + length and length <= self.server.max_message_bytes:
                self._dispatch(s, payload[5:])
                if flags & _END_STREAM:
                    self._end_of_input(s)
                return
        others = self.server.buffered_total - self.held  # as of their last read
        if self.buffered + len(payload) > self.server.max_buffered_bytes:
            self._finish(
                s,
                RESOURCE_EXHAUSTED,
                f"the connection holds {self.buffered} bytes of partial messages,"
                f" the limit is {self.server.max_buffered_bytes}",
            )
        elif others > 0 and (
            others + self.buffered + len(payload) > self.server.max_buffered_total
        ):
            self._finish(
                s,
                RESOURCE_EXHAUSTED,
                f"the server holds {others + self.buffered} bytes of partial messages and"
                f" frames over all connections, the limit is {self.server.max_buffered_total}",
            )
        else:
            s.buf += payload
            self._messages(s)
            if not s.closed:
                self.buffered += len(s.buf) - s.counted
                s.counted = len(s.buf)
                partials = self.server._partials
                if not s.buf:
                    partials.pop((self, s.sid), None)
                elif (self, s.sid) not in partials:  # a message begun: its deadline runs
                    partials[(self, s.sid)] = asyncio.get_running_loop().time()
                    self.server._schedule_sweep()
        if flags & _END_STREAM:
            self._end_of_input(s)

    # --- gRPC messages --------------------------------------------------------------
    def _messages(self, s: _Stream) -> None:
        buf = s.buf
        limit = self.server.max_message_bytes
        while len(buf) >= 5 and not s.closed:
            compressed = buf[0]
            length = int.from_bytes(buf[1:5], "big")
            if length > limit:
                self._finish(
                    s, RESOURCE_EXHAUSTED, f"message of {length} bytes over the limit {limit}"
                )
                return
            if len(buf) < 5 + length:
                return
            msg: bytes | memoryview
            if len(buf) == 5 + length:
                # the stream takes a new buffer, so the message is not copied out of this
                # one: a large message is handed on as a view into it (never resized again)
                msg = memoryview(buf)[5:].toreadonly() if length >= _VIEW_FROM else bytes(buf[5:])
                s.buf = buf = bytearray()  # (`counted` still says what the connection holds)
            else:
                with memoryview(buf) as view:
                    msg = bytes(view[5 : 5 + length])
                del buf[: 5 + length]
            if compressed:
                self._finish(s, UNIMPLEMENTED, "compressed messages are not supported")
                return
            self._dispatch(s, msg)

    def _dispatch(self, s: _Stream, msg: bytes | memoryview) -> None:
        if s.handler is None:
            msg = bytes(msg)  # health: small, kept
            s.messages.append(msg)
            if s.path == HEALTH_WATCH and s.cancel is None:
                self._watch(s, msg)
            return
        try:
            answers = s.handler.on_message(msg)
        except GrpcError as exc:
            self._finish(s, exc.code, exc.message)
            return
        except Exception as exc:  # noqa: BLE001 - the stream fails, the server goes on
            log.exception("ext_proc handler failed")
            self._finish(s, INTERNAL, f"{type(exc).__name__}: {exc}")
            return
        if answers:
            self._send_messages(s, answers)
        if s.handler.finished:
            self._finish(s, OK)

    def _end_of_input(self, s: _Stream) -> None:
        s.remote_done = True
        if s.expect is not None and s.body != s.expect:
            self._reset(s.sid, _PROTOCOL_ERROR)  # DATA other than content-length (8.1.1)
            return
        if s.closed:
            return
        if s.path == HEALTH_CHECK:
            self._check(s)
        elif s.handler is not None:
            self._finish(s, OK)
        # a Watch stream stays open after the client's half-close

    def _request_service(self, s: _Stream, msg: bytes) -> str | None:
        try:
            return health_pb2.HealthCheckRequest.FromString(msg).service
        except Exception:  # noqa: BLE001 - protobuf's DecodeError
            self._finish(s, INTERNAL, "unreadable HealthCheckRequest")
            return None

    def _check(self, s: _Stream) -> None:
        service = self._request_service(s, s.messages[0] if s.messages else b"")
        if service is None:
            return
        status = self.server.health.get(service)
        if status is None:
            self._finish(s, NOT_FOUND, f"unknown service {service!r}")
            return
        self._send_message(s, health_pb2.HealthCheckResponse(status=status).SerializeToString())
        self._finish(s, OK)

    def _watch(self, s: _Stream, msg: bytes) -> None:
        service = self._request_service(s, msg)
        if service is None:
            return

        def tell(status: int) -> None:
            if not s.closed:
                self._send_message(
                    s, health_pb2.HealthCheckResponse(status=status).SerializeToString()
                )
                if not self.in_callback:
                    self._flush()

        status = self.server.health.get(service)
        tell(health_pb2.HealthCheckResponse.SERVICE_UNKNOWN if status is None else status)
        s.cancel = self.server.health.watch(service, tell)

    # --- frames out -----------------------------------------------------------------
    def _send_message(self, s: _Stream, msg: bytes) -> None:
        self._send_messages(s, [msg])

    def _send_messages(self, s: _Stream, msgs: list[bytes]) -> None:
        """gRPC messages, length-prefixed, in as few DATA frames as the peer allows."""
        if s.closed:
            return
        if not s.headers_sent:
            s.headers_sent = True
            self.out.append(_frame(_HEADERS, _END_HEADERS, s.sid, _RESPONSE_HEADERS))
        parts = []
        for msg in msgs:
            parts.append(_MESSAGE_PREFIX.pack(0, len(msg)))
            parts.append(msg)
        data = b"".join(parts)
        n = len(data)
        if not s.pending and n <= min(self.peer_max_frame, s.send_window, self.peer_window):
            self.out.append(_FRAME.pack(n << 8 | _DATA, 0, s.sid))  # one frame, no copy
            self.out.append(data)
            s.send_window -= n
            self.peer_window -= n
            return
        s.pending += data
        self.pending_bytes += n
        if self.pending_bytes > self.server.max_pending_bytes:  # the peer does not read
            self._goaway(
                _ENHANCE_YOUR_CALM,
                f"over {self.server.max_pending_bytes} bytes of answers wait for the peer's"
                " flow-control window",
            )
            return
        self._send_pending(s)

    def _send_pending(self, s: _Stream) -> None:
        """DATA frames as far as both windows allow, then the trailers once all is out."""
        pending = s.pending
        while pending:
            n = min(len(pending), self.peer_max_frame, s.send_window, self.peer_window)
            if n <= 0:
                self.blocked[s.sid] = s
                return
            self.out.append(_frame(_DATA, 0, s.sid, bytes(pending[:n])))
            del pending[:n]
            s.send_window -= n
            self.peer_window -= n
            self.pending_bytes -= n
        self.blocked.pop(s.sid, None)
        if s.trailers is not None:
            self.out.append(_frame(_HEADERS, _END_HEADERS | _END_STREAM, s.sid, s.trailers))
            s.trailers = None
            self.streams.pop(s.sid, None)
            self._idle_now()
            _close_handler(s)
            self._forget(s.sid, tolerate=not s.remote_done)
            if self.reset_credit < _RESET_BUDGET:
                self.reset_credit += 1  # an answered stream earns back a reset
            if self.draining and not self.streams:
                self._close()

    def _finish(self, s: _Stream, code: int, message: str = "") -> None:
        """End the stream with a gRPC status (trailers-only when nothing was sent yet)."""
        if s.closed:
            return
        s.closed = True
        self._release(s)
        if s.cancel is not None:
            s.cancel()
            s.cancel = None
        block = _OK_TRAILERS if code == OK and not message else _trailers(code, message)
        if not s.headers_sent:
            s.headers_sent = True
            block = _RESPONSE_HEADERS + block
        s.trailers = block
        self._send_pending(s)

    def _release(self, s: _Stream) -> None:
        """Give back what the stream's partial message held of the connection's budget."""
        self.buffered -= s.counted
        s.counted = 0
        s.buf = bytearray()
        self.server._partials.pop((self, s.sid), None)
        if not self.in_callback:
            self._account()

    def _message_late(self, sid: int) -> None:
        """The stream's partial message is older than the server's `message_timeout`."""
        s = self.streams.get(sid)
        if s is None or s.closed:
            return
        self.server.late_messages += 1
        timeout = self.server.message_timeout
        # _finish releases the message, and `_release` accounts it (no callback runs now)
        self._finish(s, RESOURCE_EXHAUSTED, f"a message did not arrive whole within {timeout:g} s")
        self._flush()

    def _open(self, s: _Stream) -> None:
        """A stream taken: the connection is busy, no longer a candidate for eviction."""
        self.streams[s.sid] = s
        self.server._idle.pop(self, None)

    def _idle_now(self) -> None:
        """With no stream left, the connection is the newest idle one (evicted first the
        oldest, at `max_connections`)."""
        if not self.streams and self.served:
            self.server._idle.pop(self, None)
            self.server._idle[self] = None

    def _forget(self, sid: int, tolerate: bool) -> None:
        """Remember a stream that left `streams` (bounded: the oldest is forgotten)."""
        closed = self.closed
        closed[sid] = tolerate
        if len(closed) > _CLOSED_MEMORY:
            del closed[next(iter(closed))]

    def _drop(self, sid: int, tolerate: bool) -> None:
        """The stream ends here (reset by either side); `tolerate`: the peer's frames on it
        may still arrive and are ignored (this side reset it)."""
        self.blocked.pop(sid, None)
        s = self.streams.pop(sid, None)
        self._idle_now()
        if s is not None:
            s.closed = True
            self._release(s)
            self.pending_bytes -= len(s.pending)
            s.pending = bytearray()
            if s.cancel is not None:
                s.cancel()
            _close_handler(s)
        self._forget(sid, tolerate)
        if self.draining and not self.streams:
            self._close()

    def _reset(self, sid: int, code: int) -> None:
        """A stream error (RFC 9113 section 5.4.2): RST_STREAM with `code`, the stream gone."""
        self.out.append(_frame(_RST, 0, sid, struct.pack(">I", code)))
        self._drop(sid, tolerate=True)

    def _goaway(self, code: int, why: str) -> None:
        """Connection error: GOAWAY, then a lingering close where the transport can half-close
        (plain TCP), so that the peer reads the GOAWAY instead of a reset; else close."""
        self._queue_goaway(code, why)
        self._flush()
        self._unserve()
        transport = self.transport
        if transport is None or self.lingering is not None:
            return
        if not transport.can_write_eof():
            transport.close()
            return
        self.buf.clear()
        transport.write_eof()
        self.lingering = asyncio.get_running_loop().call_later(_LINGER_S, self._close)

    def _queue_goaway(self, code: int, why: str) -> None:
        """Queue a GOAWAY naming the last stream this side took."""
        payload = struct.pack(">II", self.last_stream, code) + why.encode()[:200]
        self.out.append(_frame(_GOAWAY, 0, 0, payload))

    def _close(self) -> None:
        """Close once what is queued has been written."""
        self._flush()
        if self.transport is not None:
            self.transport.close()

    def busy(self) -> bool:
        """A stream other than a health Watch is in flight."""
        return any(s.path != HEALTH_WATCH for s in self.streams.values())

    def drain(self, why: str) -> None:
        """Graceful shutdown: GOAWAY (NO_ERROR) naming the last stream this side took; the
        streams up to it finish, later ones are refused; closes after the last one ends."""
        if self.draining or self.transport is None or self.lingering is not None:
            return
        self.draining = True
        self._unserve()
        self._queue_goaway(0, why)  # NO_ERROR
        if self.streams:
            self._flush()
        else:
            self._close()

    def _flush(self) -> None:
        if self.out and self.transport is not None and self.lingering is None:
            self.transport.write(b"".join(self.out))
        self.out.clear()


class _ConnectionError(Exception):
    """The peer broke HTTP/2 or a limit: a connection error (RFC 9113 section 5.4.1)."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code = code


class _ProtocolError(_ConnectionError):
    """The peer broke HTTP/2 (connection error PROTOCOL_ERROR)."""

    def __init__(self, why: str) -> None:
        super().__init__(_PROTOCOL_ERROR, why)


class H2GrpcServer:
    """Serves `methods` (path -> stream handler factory) and gRPC health on one port."""

    def __init__(
        self,
        methods: dict[str, StreamFactory],
        health: HealthStatus,
        *,
        max_message_bytes: int = 4 << 20,
        max_concurrent_streams: int = 1024,
        max_buffered_bytes: int | None = None,
        max_pending_bytes: int | None = None,
        max_buffered_total: int = 256 << 20,
        max_connections: int = 1024,
        preface_timeout: float = 10.0,
        message_timeout: float = 30.0,
    ) -> None:
        self.methods = methods
        self.health = health
        self.max_message_bytes = max_message_bytes
        # SETTINGS_MAX_CONCURRENT_STREAMS, advertised and enforced (REFUSED_STREAM past it)
        self.max_concurrent_streams = max_concurrent_streams
        # partial messages held over one connection's streams (RESOURCE_EXHAUSTED past it)
        self.max_buffered_bytes = max_buffered_bytes or max(64 << 20, 2 * max_message_bytes)
        # answers held for one connection's flow-control windows (ENHANCE_YOUR_CALM past it)
        self.max_pending_bytes = max_pending_bytes or max(64 << 20, 2 * max_message_bytes)
        # partial frames and messages held over all connections (a stream or connection that
        # would pass it, beside others holding bytes, is refused: one alone always fits)
        self.max_buffered_total = max_buffered_total
        self.buffered_total = 0
        # connections served at once: at the limit the one idle longest (no stream) gets
        # GOAWAY to make room; with none idle the new one gets GOAWAY (NO_ERROR, last stream 0)
        self.max_connections = max_connections
        self.served = 0
        self.refused_connections = 0
        self.evicted_connections = 0
        self.preface_timeout = preface_timeout  # the client's preface must come by then
        self._idle: dict[_Connection, None] = {}  # served, no stream: oldest first
        self._paused: dict[_Connection, None] = {}  # reading paused for `buffered_total`
        # a gRPC message begun must arrive whole within this (RESOURCE_EXHAUSTED after): else
        # a peer that begins messages and never ends them holds `buffered_total` for ever
        self.message_timeout = message_timeout
        self._partials: dict[tuple[_Connection, int], float] = {}  # (conn, sid): begun at
        self._sweep: asyncio.TimerHandle | None = None
        self.late_messages = 0
        self.paused_reads = 0  # times a connection's reading was paused for it
        self.connection_errors = 0  # connections ended for a peer's HTTP/2 error or a limit
        self.internal_errors = 0  # connections ended by a bug here (the fuzz test wants 0)
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[_Connection] = set()
        self._all_gone: asyncio.Event | None = None  # set while stopping
        self.port = 0

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> int:
        """Listen; returns the port (the kernel's choice for 0). OSError when it cannot."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self), host, port, ssl=tls, reuse_address=True, backlog=1024
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    def _schedule_sweep(self) -> None:
        if self._sweep is None and self._partials:
            first = next(iter(self._partials.values()))
            loop = asyncio.get_running_loop()
            self._sweep = loop.call_at(first + self.message_timeout, self._expire)

    def _expire(self) -> None:
        """End the streams whose partial message is past `message_timeout` (oldest first)."""
        self._sweep = None
        now = asyncio.get_running_loop().time()
        while self._partials:
            (c, sid), since = next(iter(self._partials.items()))
            if since + self.message_timeout > now:
                break
            del self._partials[(c, sid)]
            c._message_late(sid)
        self._schedule_sweep()

    def _resume_paused(self) -> None:
        paused, self._paused = self._paused, {}
        for c in paused:
            c.resume_reading_for_total()

    def _admit(self, c: _Connection) -> bool:
        """Count `c` among the served connections, making room by draining the one idle
        longest at the limit; False when none is idle (the caller refuses `c`)."""
        if self.served >= self.max_connections:
            if not self._idle:
                return False
            oldest = next(iter(self._idle))
            self.evicted_connections += 1
            oldest.drain("the server is at its connection limit: closing an idle connection")
        self.served += 1
        c.served = True
        self._idle[c] = None
        return True

    def _connection_gone(self, c: _Connection) -> None:
        self._connections.discard(c)
        if not self._connections and self._all_gone is not None:
            self._all_gone.set()

    async def stop(self, grace: float = 0.5) -> None:
        """Stop listening and drain every connection (GOAWAY); the streams in flight get
        `grace` seconds to finish (as grpcio's `stop(grace)`), then the connections still
        open (a stalled peer) are cut. Health Watch streams, which never end by themselves,
        do not hold the drain: once only they are left, their connections are cut."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        self._all_gone = asyncio.Event()
        for c in list(self._connections):
            c.drain("server stopping")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while any(c.busy() for c in self._connections) and loop.time() < deadline:
            try:
                await asyncio.wait_for(self._all_gone.wait(), min(0.05, grace))
            except TimeoutError:
                pass
        for c in list(self._connections):
            if c.transport is not None:
                c.transport.abort()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        # Python 3.12+ waits here for every accepted transport, TLS handshakes in progress
        # too, which are no _Connection yet and so were not cut above (up to the handshake
        # timeout, 60 s): the wait is bounded
        try:
            await asyncio.wait_for(server.wait_closed(), _CLOSE_WAIT_S)
        except TimeoutError:
            log.warning("connections still open after the drain")


def server_tls(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A TLS context for gRPC: TLS 1.2+, ALPN h2 (gRPC clients insist on it)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    ctx.set_alpn_protocols(["h2"])
    return ctx
