"""Event decoding on bytes, and the ctypes mirrors against the compiled C structs."""

from __future__ import annotations

import ctypes

import pytest

from bpf.events import (
    ACCEPT_EVENT_SIZE,
    HTTP_EVENT_HEADER_SIZE,
    AcceptEvent,
    ConnState,
    EventDecodeError,
    HttpEvent,
    HttpEventKind,
    SockKeyStruct,
    TcpStatsStruct,
    decode_accept_event,
    decode_http_event,
    decode_sock_key,
    decode_tcp_stats,
    encode_accept_event,
    encode_http_event,
)


def test_http_event_round_trip() -> None:
    ev = HttpEvent(
        HttpEventKind.REQUEST,
        123,
        7,
        42,
        9,
        8000,
        300,
        ConnState.RESPONDING,
        100,
        55,
        b"GET / HTTP/1.1\r\n\r\n",
    )
    raw = encode_http_event(ev)
    assert len(raw) == HTTP_EVENT_HEADER_SIZE + 512
    assert decode_http_event(raw) == ev


def test_close_event_is_header_only() -> None:
    ev = HttpEvent(HttpEventKind.CLOSE, 1, 2, 3, 4, 80, 0, ConnState.IDLE, 0, 0, b"")
    raw = encode_http_event(ev)
    assert len(raw) == HTTP_EVENT_HEADER_SIZE and decode_http_event(raw) == ev


def test_http_event_layout_is_fixed() -> None:
    # ts, conn_id, prev_end, prev_bytes, req_end, sse_first, sse_last (7 x u64),
    # tgid, fd, len, total (4 x u32), port u16, kind u8, prev_state u8, sse_events u32,
    # resp_ns u64, status u32, flags u32 (COMPLETE records)
    assert HTTP_EVENT_HEADER_SIZE == 96
    raw = bytearray(HTTP_EVENT_HEADER_SIZE + 4)
    raw[0:8] = (5).to_bytes(8, "little")
    raw[40:48] = (900).to_bytes(8, "little")
    raw[56:60] = (77).to_bytes(4, "little")
    raw[64:68] = (4).to_bytes(4, "little")
    raw[72:74] = (8080).to_bytes(2, "little")
    raw[74] = 3
    raw[76:80] = (12).to_bytes(4, "little")
    raw[80:88] = (950).to_bytes(8, "little")
    raw[88:92] = (204).to_bytes(4, "little")
    raw[92:96] = (1).to_bytes(4, "little")
    raw[HTTP_EVENT_HEADER_SIZE:] = b"HTTP"
    ev = decode_http_event(bytes(raw))
    assert (ev.ts_ns, ev.tgid, ev.port, ev.kind, ev.data, ev.sse_first_ns, ev.sse_events) == (
        5,
        77,
        8080,
        HttpEventKind.RESPONSE,
        b"HTTP",
        900,
        12,
    )
    assert (ev.resp_ns, ev.status, ev.flags) == (950, 204, 1)


@pytest.mark.parametrize("raw", [b"", b"\x00" * 10], ids=["empty", "short"])
def test_short_events_rejected(raw: bytes) -> None:
    with pytest.raises(EventDecodeError):
        decode_http_event(raw)
    with pytest.raises(EventDecodeError):
        decode_accept_event(raw)


def test_unknown_kind_rejected() -> None:
    raw = bytearray(HTTP_EVENT_HEADER_SIZE)
    raw[50] = 99
    with pytest.raises(EventDecodeError, match="kind"):
        decode_http_event(bytes(raw))


@pytest.mark.parametrize(
    "peer", ["10.1.2.3", "fd00::1", "::ffff:10.0.0.9"], ids=["ipv4", "ipv6", "v4-mapped"]
)
def test_accept_event_round_trip(peer: str) -> None:
    ev = AcceptEvent(1, 2, 3_000_000, 10, 11, 8000, 4, 4096, peer, 51000)
    got = decode_accept_event(encode_accept_event(ev))
    expected = "10.0.0.9" if peer.startswith("::ffff:") else peer
    assert got == AcceptEvent(1, 2, 3_000_000, 10, 11, 8000, 4, 4096, expected, 51000)
    assert ACCEPT_EVENT_SIZE == 64


def test_tcp_stats_decode() -> None:
    s = TcpStatsStruct(rtt_count=3, rtt_sum_us=300, retransmits=1)
    s.rtt_slots[6] = 3
    st = decode_tcp_stats(bytes(s))
    assert (st.rtt_count, st.rtt_sum_us, st.retransmits, st.rtt_slots[6]) == (3, 300, 1, 3)
    assert decode_sock_key(bytes(SockKeyStruct(tgid=9, port=80))) == (9, 80)


@pytest.mark.bpf
def test_mirrors_match_compiled_structs(probes: object) -> None:
    bpf = probes.session._bpf  # type: ignore[attr-defined]
    # per-CPU array: bcc keeps the one-CPU value type in sLeaf
    assert ctypes.sizeof(bpf[b"http_scratch"].sLeaf) == HTTP_EVENT_HEADER_SIZE + 512
    assert ctypes.sizeof(bpf[b"tcp_stats"].Leaf) == ctypes.sizeof(TcpStatsStruct)
    assert ctypes.sizeof(bpf[b"tcp_stats"].Key) == ctypes.sizeof(SockKeyStruct)
    lost = probes.session.lost_events()  # type: ignore[attr-defined]
    assert set(lost) == {"http", "accept", "budget", "held"}
    assert all(v >= 0 for v in lost.values())
    leaf = bpf[b"conns"].Leaf
    assert {n for n, *_ in leaf._fields_} >= {
        "id", "sk", "last_write_ns", "state", "port", "deferred"
    }  # fmt: skip
    assert ctypes.sizeof(bpf[b"pending_reqs"].Leaf) == HTTP_EVENT_HEADER_SIZE + 512
