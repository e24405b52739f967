"""Connection state machine: keep-alive, streams, close, unanswered and bounded tables."""

from __future__ import annotations

from bpf.events import AcceptEvent, ConnState, HttpEvent, HttpEventKind
from bpf.tracker import ConnTracker

MS = 1_000_000


def ev(
    kind: HttpEventKind,
    ts: int,
    data: bytes = b"",
    prev_end: int = 0,
    fd: int = 5,
    prev: ConnState = ConnState.IDLE,
    conn: int = 1,
) -> HttpEvent:
    return HttpEvent(
        kind=kind,
        ts_ns=ts,
        conn_id=conn,
        tgid=100,
        fd=fd,
        port=8000,
        total=len(data),
        prev_state=prev,
        prev_end_ns=prev_end,
        prev_resp_bytes=10,
        data=data,
    )


REQ = b"POST /v1/chat/completions HTTP/1.1\r\nX-LLM-Context-ID: a\r\n\r\n"
RESP = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"
SSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"


def test_keepalive_request_ends_at_next_request() -> None:
    t = ConnTracker()
    t.on_accept(AcceptEvent(0, 1, 0, 100, 5, 8000, 1, 128, "10.0.0.7", 5555))
    assert t.on_http(ev(HttpEventKind.REQUEST, 0, REQ)) == []
    assert t.on_http(ev(HttpEventKind.RESPONSE, 20 * MS, RESP)) == []
    out = t.on_http(
        ev(HttpEventKind.REQUEST, 100 * MS, REQ, prev_end=25 * MS, prev=ConnState.RESPONDING)
    )
    assert len(out) == 1
    r = out[0]
    assert (r.ttfb_s, r.duration_s) == (0.02, 0.025)
    assert (r.route, r.status, r.context_id, r.peer) == (
        "/v1/chat/completions",
        200,
        "a",
        "10.0.0.7",
    )
    t.on_http(ev(HttpEventKind.RESPONSE, 130 * MS, SSE))
    out = t.on_http(ev(HttpEventKind.CLOSE, 900 * MS, prev_end=800 * MS, prev=ConnState.RESPONDING))
    assert len(out) == 1 and out[0].streaming and abs(out[0].duration_s - 0.7) < 1e-9
    assert len(t) == 0 and t.counters.requests == 2


def test_request_split_over_reads_is_joined() -> None:
    t = ConnTracker()
    t.on_http(ev(HttpEventKind.REQUEST, 0, b"POST /v1/chat/completions HTTP/1.1\r\n\r\n"))
    t.on_http(ev(HttpEventKind.REQUEST_MORE, 1, b'{"content":[{"type":"image_url"}]}'))
    t.on_http(ev(HttpEventKind.RESPONSE, 5 * MS, RESP))
    (r,) = t.on_http(ev(HttpEventKind.CLOSE, 9 * MS, prev_end=6 * MS))
    assert r.modality == "image" and r.images == 1


def test_unanswered_and_orphans_are_counted_not_reported() -> None:
    t = ConnTracker()
    t.on_http(ev(HttpEventKind.REQUEST, 0, REQ))
    assert t.on_http(ev(HttpEventKind.CLOSE, 5 * MS)) == []
    assert t.counters.unanswered == 1
    t.on_http(ev(HttpEventKind.RESPONSE, 1, RESP, fd=9))
    assert t.counters.orphan_events == 1


def test_fd_reuse_is_a_new_connection() -> None:
    t = ConnTracker()
    t.on_http(ev(HttpEventKind.REQUEST, 0, REQ, conn=1))
    t.on_http(ev(HttpEventKind.REQUEST, 0, REQ, conn=2))
    assert len(t) == 2


def test_table_is_bounded() -> None:
    t = ConnTracker(max_conns=10)
    for fd in range(50):
        t.on_http(ev(HttpEventKind.REQUEST, 0, REQ, fd=fd))
    assert len(t) == 10 and t.counters.evicted == 40


def test_in_flight_counts_waiting_and_recently_writing() -> None:
    t = ConnTracker()
    t.on_http(ev(HttpEventKind.REQUEST, 0, REQ, fd=1))  # waiting for first byte
    t.on_http(ev(HttpEventKind.REQUEST, 0, REQ, fd=2))
    t.on_http(ev(HttpEventKind.RESPONSE, 1 * MS, SSE, fd=2))  # streaming, wrote recently
    t.on_http(ev(HttpEventKind.REQUEST, 0, REQ, fd=3))
    t.on_http(ev(HttpEventKind.RESPONSE, 1 * MS, RESP, fd=3))  # finished long ago
    last = {2: 4_900 * MS, 3: 10 * MS}
    assert t.in_flight(5_000 * MS, lambda tgid, fd: last.get(fd), idle_s=1.0) == 2


def test_end_event_closes_the_previous_request_without_opening_one() -> None:
    """Over the kernel's request budget a request is not sampled; the one before it ends."""
    t = ConnTracker()
    t.on_http(ev(HttpEventKind.REQUEST, 0, REQ))
    t.on_http(ev(HttpEventKind.RESPONSE, 10 * MS, RESP))
    (r,) = t.on_http(ev(HttpEventKind.END, 50 * MS, prev_end=12 * MS, prev=ConnState.RESPONDING))
    assert r.duration_s == 0.012
    assert t.on_http(ev(HttpEventKind.CLOSE, 90 * MS, prev_end=80 * MS)) == []
    assert t.counters.requests == 1
