"""ctypes mirrors of `programs/events.h` and pure decoders from raw event bytes.

Decoding is separate from reading so it is tested on bytes without a kernel. Sizes
here must match the C structs; `tests/bpf` checks them against the compiled programs.
"""

from __future__ import annotations

import ctypes
import ipaddress
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

__all__ = [
    "HttpEventKind",
    "ConnState",
    "RESP_F_EVENT_STREAM",
    "HttpEventHeader",
    "AcceptEventStruct",
    "SockKeyStruct",
    "HttpEvent",
    "AcceptEvent",
    "TcpStats",
    "RTT_SLOTS",
    "HTTP_EVENT_HEADER_SIZE",
    "HTTP_HEADER",
    "HTTP_KIND_AT",
    "COMPLETE_FIELDS",
    "COMPLETE_SSE_FIELDS",
    "COMPLETE_SSE_AT",
    "ACCEPT_EVENT_SIZE",
    "EventDecodeError",
    "decode_http_event",
    "decode_accept_event",
    "decode_sock_key",
    "decode_tcp_stats",
    "encode_http_event",
    "encode_accept_event",
]

RTT_SLOTS = 32
AF_INET = 2
AF_INET6 = 10


class HttpEventKind(IntEnum):
    REQUEST = 1
    REQUEST_MORE = 2
    RESPONSE = 3
    CLOSE = 4
    END = 5  # the response ended (complete at this write, or before an unsampled request)
    RESPONSE_DONE = 6  # first bytes of a response that the same write completes
    COMPLETE = 7  # a whole request: its bytes, the response's times and status


RESP_F_EVENT_STREAM = 1  # COMPLETE flags: the response is text/event-stream


class ConnState(IntEnum):
    IDLE = 0
    REQUEST = 1
    RESPONDING = 2


class EventDecodeError(ValueError):
    """Bytes that are not an event of the expected layout."""


class HttpEventHeader(ctypes.Structure):
    """`struct http_event` without its `data[CAPTURE_BYTES]` tail."""

    _fields_ = [
        ("ts_ns", ctypes.c_uint64),
        ("conn_id", ctypes.c_uint64),
        ("prev_end_ns", ctypes.c_uint64),
        ("prev_resp_bytes", ctypes.c_uint64),
        ("req_end_ns", ctypes.c_uint64),
        ("sse_first_ns", ctypes.c_uint64),
        ("sse_last_ns", ctypes.c_uint64),
        ("tgid", ctypes.c_uint32),
        ("fd", ctypes.c_uint32),
        ("len", ctypes.c_uint32),
        ("total", ctypes.c_uint32),
        ("port", ctypes.c_uint16),
        ("kind", ctypes.c_uint8),
        ("prev_state", ctypes.c_uint8),
        ("sse_events", ctypes.c_uint32),
        ("resp_ns", ctypes.c_uint64),
        ("status", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
    ]


class AcceptEventStruct(ctypes.Structure):
    _fields_ = [
        ("ts_ns", ctypes.c_uint64),
        ("conn_id", ctypes.c_uint64),
        ("queue_ns", ctypes.c_uint64),
        ("tgid", ctypes.c_uint32),
        ("fd", ctypes.c_uint32),
        ("backlog", ctypes.c_uint32),
        ("max_backlog", ctypes.c_uint32),
        ("port", ctypes.c_uint16),
        ("peer_port", ctypes.c_uint16),
        ("family", ctypes.c_uint16),
        ("pad", ctypes.c_uint16),
        ("peer_addr", ctypes.c_uint8 * 16),
    ]


class SockKeyStruct(ctypes.Structure):
    _fields_ = [("tgid", ctypes.c_uint32), ("port", ctypes.c_uint16), ("pad", ctypes.c_uint16)]


class TcpStatsStruct(ctypes.Structure):
    _fields_ = [
        ("rtt_count", ctypes.c_uint64),
        ("rtt_sum_us", ctypes.c_uint64),
        ("retransmits", ctypes.c_uint64),
        ("rtt_slots", ctypes.c_uint64 * RTT_SLOTS),
    ]


_CODES: dict[type, str] = {
    ctypes.c_uint64: "Q",
    ctypes.c_uint32: "I",
    ctypes.c_uint16: "H",
    ctypes.c_uint8: "B",
}


def _unpacker(mirror: type[ctypes.Structure]) -> struct.Struct:
    """The `struct` layout of a ctypes mirror, field by field (a byte array is one bytes
    field), so the layout is written once: unpacking a `struct.Struct` builds no ctypes
    object, which the per-event paths count on."""
    codes = []
    for field in mirror._fields_:
        ctype, size = field[1], ctypes.sizeof(field[1])
        if ctype is ctypes.c_uint8 * size:  # ctypes keeps one type per array shape
            codes.append(f"{size}s")
        else:
            codes.append(_CODES[ctype])
    layout = struct.Struct("<" + "".join(codes))
    assert layout.size == ctypes.sizeof(mirror)  # no padding between the fields
    return layout


HTTP_EVENT_HEADER_SIZE = ctypes.sizeof(HttpEventHeader)
# HttpEventHeader's layout; public for the tracker's fast path (bpf/tracker.py)
HTTP_HEADER = _unpacker(HttpEventHeader)
# a COMPLETE record's fields of a request without a token stream, the others skipped
# (ts, conn_id, prev_end, prev_bytes, tgid, fd, len, resp_ns, status, flags), and its
# token-stream fields from offset 32 (req_end, sse_first, sse_last, sse_events): the fast
# path unpacks only what it uses (each field unpacked is an int built)
COMPLETE_FIELDS = struct.Struct("<QQQQ24xIII12xQII")
COMPLETE_SSE_FIELDS = struct.Struct("<QQQ20xI")
COMPLETE_SSE_AT = HttpEventHeader.req_end_ns.offset
HTTP_KIND_AT = HttpEventHeader.kind.offset
assert COMPLETE_FIELDS.size == HTTP_EVENT_HEADER_SIZE
assert COMPLETE_SSE_AT + COMPLETE_SSE_FIELDS.size == HttpEventHeader.resp_ns.offset
_KINDS = {int(k): k for k in HttpEventKind}
_STATES = {int(s): s for s in ConnState}
ACCEPT_EVENT_SIZE = ctypes.sizeof(AcceptEventStruct)
_ACCEPT = _unpacker(AcceptEventStruct)


class HttpEvent(NamedTuple):
    """One HTTP event. Times are CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns).

    A NamedTuple, not a dataclass: one is built per kernel event, so creation cost counts.
    """

    kind: HttpEventKind
    ts_ns: int
    conn_id: int
    tgid: int
    fd: int
    port: int
    total: int
    prev_state: ConnState
    prev_end_ns: int
    prev_resp_bytes: int
    data: bytes
    req_end_ns: int = 0  # RESPONSE*: the request's last read; ending events: the ending one's
    sse_first_ns: int = 0  # events ending an SSE response: its first and last data event
    sse_last_ns: int = 0
    sse_events: int = 0  # data events (data: [DONE] excluded), 0 when not an SSE stream
    # COMPLETE: ts_ns is the request's first read, resp_ns the response's first write,
    # prev_end_ns its end; status and flags (RESP_F_*) read from its head in the kernel
    resp_ns: int = 0
    status: int = 0
    flags: int = 0


class AcceptEvent(NamedTuple):
    ts_ns: int
    conn_id: int
    queue_ns: int
    tgid: int
    fd: int
    port: int
    backlog: int
    max_backlog: int
    peer: str
    peer_port: int


@dataclass(frozen=True)
class TcpStats:
    """Kernel-aggregated TCP statistics of one (process, port); RTT in microseconds."""

    rtt_count: int
    rtt_sum_us: int
    retransmits: int
    rtt_slots: tuple[int, ...]


def decode_http_event(raw: bytes) -> HttpEvent:
    """Decode `struct http_event` (CLOSE events carry only the header)."""
    if len(raw) < HTTP_EVENT_HEADER_SIZE:
        raise EventDecodeError(
            f"http event is {len(raw)} bytes, shorter than its {HTTP_EVENT_HEADER_SIZE}-byte header"
        )
    (
        ts,
        conn,
        prev_end,
        prev_bytes,
        req_end,
        first,
        last,
        tgid,
        fd,
        n,
        total,
        port,
        kind,
        prev,
        events,
        resp_ns,
        status,
        flags,
    ) = HTTP_HEADER.unpack_from(raw)
    k = _KINDS.get(kind)
    st = _STATES.get(prev)
    if k is None or st is None:
        raise EventDecodeError(f"unknown http event kind/state: kind={kind} state={prev}")
    n = min(n, len(raw) - HTTP_EVENT_HEADER_SIZE)
    return HttpEvent(
        k,
        ts,
        conn,
        tgid,
        fd,
        port,
        total,
        st,
        prev_end,
        prev_bytes,
        bytes(raw[HTTP_EVENT_HEADER_SIZE : HTTP_EVENT_HEADER_SIZE + n]),
        req_end,
        first,
        last,
        events,
        resp_ns,
        status,
        flags,
    )


def _addr(family: int, raw: bytes) -> str:
    if family == AF_INET:
        return str(ipaddress.IPv4Address(raw[:4]))
    if family == AF_INET6:
        a = ipaddress.IPv6Address(raw[:16])
        return str(a.ipv4_mapped or a)
    return ""


def decode_accept_event(raw: bytes) -> AcceptEvent:
    if len(raw) < ACCEPT_EVENT_SIZE:
        raise EventDecodeError(f"accept event is {len(raw)} bytes, expected {ACCEPT_EVENT_SIZE}")
    ts, conn, queue, tgid, fd, backlog, most, port, peer_port, family, _, addr = (
        _ACCEPT.unpack_from(raw)
    )
    return AcceptEvent(
        ts, conn, queue, tgid, fd, port, backlog, most, _addr(family, addr), peer_port
    )


def decode_sock_key(raw: bytes) -> tuple[int, int]:
    if len(raw) < ctypes.sizeof(SockKeyStruct):
        raise EventDecodeError("sock key too short")
    k = SockKeyStruct.from_buffer_copy(raw[: ctypes.sizeof(SockKeyStruct)])
    return (k.tgid, k.port)


def decode_tcp_stats(raw: bytes) -> TcpStats:
    if len(raw) < ctypes.sizeof(TcpStatsStruct):
        raise EventDecodeError("tcp_stats value too short")
    s = TcpStatsStruct.from_buffer_copy(raw[: ctypes.sizeof(TcpStatsStruct)])
    return TcpStats(s.rtt_count, s.rtt_sum_us, s.retransmits, tuple(s.rtt_slots))


def encode_http_event(ev: HttpEvent, capture_bytes: int = 512) -> bytes:
    """The bytes the kernel would send for `ev` (tests and the benchmark's replay)."""
    h = HttpEventHeader(
        ts_ns=ev.ts_ns,
        conn_id=ev.conn_id,
        prev_end_ns=ev.prev_end_ns,
        prev_resp_bytes=ev.prev_resp_bytes,
        req_end_ns=ev.req_end_ns,
        sse_first_ns=ev.sse_first_ns,
        sse_last_ns=ev.sse_last_ns,
        sse_events=ev.sse_events,
        resp_ns=ev.resp_ns,
        status=ev.status,
        flags=ev.flags,
        tgid=ev.tgid,
        fd=ev.fd,
        len=len(ev.data),
        total=ev.total,
        port=ev.port,
        kind=int(ev.kind),
        prev_state=int(ev.prev_state),
    )
    if ev.kind in (HttpEventKind.CLOSE, HttpEventKind.END):
        return bytes(h)
    return bytes(h) + ev.data[:capture_bytes].ljust(capture_bytes, b"\0")


def encode_accept_event(ev: AcceptEvent) -> bytes:
    e = AcceptEventStruct(
        ts_ns=ev.ts_ns,
        conn_id=ev.conn_id,
        queue_ns=ev.queue_ns,
        tgid=ev.tgid,
        fd=ev.fd,
        backlog=ev.backlog,
        max_backlog=ev.max_backlog,
        port=ev.port,
        peer_port=ev.peer_port,
    )
    addr = ipaddress.ip_address(ev.peer) if ev.peer else None
    if addr is not None and addr.version == 4:
        e.family = AF_INET
        e.peer_addr[:4] = list(addr.packed)
    elif addr is not None:
        e.family = AF_INET6
        e.peer_addr[:] = list(addr.packed)
    return bytes(e)
