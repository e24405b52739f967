"""Connection state machine: keep-alive, streams, close, unanswered and bounded tables."""

from __future__ import annotations

import pytest

from bpf import tracker
from bpf.events import (
    RESP_F_EVENT_STREAM,
    AcceptEvent,
    ConnState,
    HttpEvent,
    HttpEventHeader,
    HttpEventKind,
    decode_http_event,
    encode_http_event,
)
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


def test_encoded_batch_tracks_what_single_events_track(monkeypatch: pytest.MonkeyPatch) -> None:
    """`on_http_raw` (the agent's path: a fast path for REQUEST / RESPONSE_DONE pairs) gives
    the records and counters `on_http` gives, event by event, for every kind of sequence."""
    two = REQ + b"GET /health HTTP/1.1\r\n\r\n"
    done = HttpEventKind.RESPONSE_DONE
    seq = [
        # keep-alive: a pair, a two-write response ended by the next request, an SSE stream
        ev(HttpEventKind.REQUEST, 0, REQ),
        ev(done, 2 * MS, RESP, prev=ConnState.REQUEST)._replace(req_end_ns=1 * MS),
        ev(HttpEventKind.REQUEST, 10 * MS, REQ),
        ev(HttpEventKind.RESPONSE, 12 * MS, RESP, prev=ConnState.REQUEST),
        ev(HttpEventKind.REQUEST, 20 * MS, REQ, prev_end=15 * MS, prev=ConnState.RESPONDING),
        ev(done, 30 * MS, SSE, prev=ConnState.REQUEST)._replace(
            req_end_ns=21 * MS, sse_first_ns=25 * MS, sse_last_ns=29 * MS, sse_events=5
        ),
        # a request over two reads; another fd, answered in one write
        ev(HttpEventKind.REQUEST, 31 * MS, REQ[:20], fd=6),
        ev(HttpEventKind.REQUEST_MORE, 32 * MS, REQ[20:], fd=6, prev=ConnState.REQUEST),
        ev(done, 33 * MS, RESP, fd=6, prev=ConnState.REQUEST),
        # pipelined: two requests in one read, two responses
        ev(HttpEventKind.REQUEST, 40 * MS, two, fd=7),
        ev(done, 41 * MS, RESP, fd=7, prev=ConnState.REQUEST),
        ev(done, 42 * MS, RESP, fd=7, prev_end=41 * MS),
        # orphans, an over-budget END, unanswered at close, the fd reused
        ev(done, 50 * MS, RESP, fd=8),
        ev(HttpEventKind.REQUEST_MORE, 51 * MS, REQ, fd=9),
        ev(HttpEventKind.REQUEST, 60 * MS, REQ),
        ev(HttpEventKind.RESPONSE, 61 * MS, RESP, prev=ConnState.REQUEST),
        ev(HttpEventKind.END, 70 * MS, prev_end=65 * MS, prev=ConnState.RESPONDING),
        ev(HttpEventKind.REQUEST, 80 * MS, REQ),
        ev(HttpEventKind.CLOSE, 90 * MS, prev_end=85 * MS),
        ev(HttpEventKind.REQUEST, 95 * MS, REQ, conn=2),
        ev(done, 96 * MS, RESP, conn=2, prev=ConnState.REQUEST),
        ev(HttpEventKind.REQUEST, 97 * MS, b"not http\r\n\r\n", conn=2),
        ev(done, 98 * MS, RESP, conn=2, prev=ConnState.REQUEST),
    ]
    one = ConnTracker()
    expected = [r for e in seq for r in one.on_http(e)]
    raws = [encode_http_event(e) for e in seq]
    bad_kind = bytearray(raws[0])
    bad_kind[HttpEventHeader.kind.offset] = 99  # the kind byte
    decoded: list[bytes] = []

    def decode(raw: bytes) -> HttpEvent:
        decoded.append(raw)
        return decode_http_event(raw)

    monkeypatch.setattr(tracker, "decode_http_event", decode)
    batch = ConnTracker()
    got, bad = batch.on_http_raw([*raws[:3], b"short", bytes(bad_kind), *raws[3:]])
    assert bad == 2
    assert got == expected and len(expected) == 8
    assert expected[2].ttft_s is not None and expected[2].tpot_s is not None
    assert batch.counters == one.counters and len(batch) == len(one)
    # the pairs on known connections skipped the general decode
    assert raws[1] not in decoded and raws[8] not in decoded and len(decoded) < len(seq)


def test_same_head_different_bodies_parse_each_body() -> None:
    """The head is parsed once per distinct head; each body still sets modality and
    image parts, and an X-Modality header still names the modality."""
    head = b"POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\n\r\n"
    declared = head.replace(b"\r\n\r\n", b"\r\nX-Modality: audio\r\n\r\n")
    two = b'{"content":[{"type":"image_url"},{"type":"image_url"}]}'
    t = ConnTracker()
    got = []
    for i, data in enumerate(
        [head + b'{"content":"hi"}', head + two, head + b'{"content":"yo"}', declared + two]
    ):
        t.on_http(ev(HttpEventKind.REQUEST, i * 10 * MS, data, fd=20 + i))
        got += t.on_http(ev(HttpEventKind.RESPONSE_DONE, (i * 10 + 1) * MS, RESP, fd=20 + i))
    assert [(r.modality, r.images) for r in got] == [
        ("text", 0),
        ("multi-image", 2),
        ("text", 0),
        ("audio", 2),
    ]
    assert len(t._head_memo) == 2


def complete(
    ts: int, data: bytes, resp_ns: int, end_ns: int, status: int = 200, fd: int = 5, **kw: int
) -> HttpEvent:
    """A COMPLETE record: the request read at `ts`, its response from `resp_ns` to `end_ns`."""
    return ev(HttpEventKind.COMPLETE, ts, data, prev_end=end_ns, fd=fd)._replace(
        resp_ns=resp_ns, status=status, **kw
    )


def test_complete_record_gives_what_the_event_sequence_gives() -> None:
    """COMPLETE (the kernel held the request until its response ended) is the record of
    REQUEST + RESPONSE + END: times, status, streaming, tokens, attribution."""
    sse = {"req_end_ns": 1 * MS, "sse_first_ns": 5 * MS, "sse_last_ns": 9 * MS, "sse_events": 5}
    for head, flags, tokens in ((RESP, 0, {"req_end_ns": 1 * MS}), (SSE, RESP_F_EVENT_STREAM, sse)):
        old, new = ConnTracker(), ConnTracker()
        for t in (old, new):
            t.on_accept(AcceptEvent(0, 1, 0, 100, 5, 8000, 1, 128, "10.0.0.7", 5555))
        old.on_http(ev(HttpEventKind.REQUEST, 0, REQ))
        old.on_http(
            ev(HttpEventKind.RESPONSE, 2 * MS, head, prev=ConnState.REQUEST)._replace(
                req_end_ns=1 * MS
            )
        )
        (want,) = old.on_http(ev(HttpEventKind.END, 10 * MS, prev_end=10 * MS)._replace(**tokens))
        (got,) = new.on_http(
            complete(0, REQ, 2 * MS, 10 * MS, flags=flags, **tokens)  # type: ignore[arg-type]
        )
        assert got == want and got.peer == "10.0.0.7" and (got.ttft_s is None) == (not flags)
        # the stream's data events are its output tokens: duration / tokens, normalized
        assert got.tokens == (5 if flags else 0)
        assert new.counters == old.counters


def test_complete_records_in_a_batch_track_what_single_events_track() -> None:
    """The fast path of `on_http_raw` for COMPLETE gives what `on_http` gives: a known
    connection, a new one, pipelined bytes, an SSE stream, bytes that are not HTTP, a
    request still pending before it."""
    two = REQ + b"GET /health HTTP/1.1\r\n\r\n"
    tokens = {"req_end_ns": 41 * MS, "sse_first_ns": 45 * MS, "sse_last_ns": 49 * MS}
    seq = [
        ev(HttpEventKind.REQUEST, 0, REQ),
        ev(HttpEventKind.RESPONSE_DONE, 2 * MS, RESP, prev=ConnState.REQUEST),
        complete(10 * MS, REQ, 12 * MS, 15 * MS),
        complete(20 * MS, REQ, 21 * MS, 21 * MS, status=404, fd=6),  # not seen before
        complete(30 * MS, two, 31 * MS, 31 * MS),  # pipelined: the second answered next
        ev(HttpEventKind.RESPONSE_DONE, 32 * MS, RESP, prev_end=31 * MS),
        complete(40 * MS, REQ, 42 * MS, 50 * MS, flags=RESP_F_EVENT_STREAM, sse_events=3, **tokens),
        complete(60 * MS, b"not http\r\n\r\n", 61 * MS, 62 * MS),
        ev(HttpEventKind.REQUEST, 70 * MS, REQ),  # unanswered as far as user space saw
        complete(80 * MS, REQ, 81 * MS, 82 * MS),
        complete(90 * MS, REQ, 91 * MS, 95 * MS),
    ]
    one = ConnTracker()
    expected = [r for e in seq for r in one.on_http(e)]
    batch = ConnTracker()
    got, bad = batch.on_http_raw([encode_http_event(e) for e in seq])
    assert bad == 0 and got == expected and len(expected) == 8
    assert [r.status for r in got] == [200, 200, 404, 200, 200, 200, 200, 200]
    assert got[5].ttft_s == 0.004 and got[5].tpot_s == 0.002 and got[5].tokens == 3
    assert all(r.tokens == 0 for i, r in enumerate(got) if i != 5)  # not streams
    assert batch.counters == one.counters and one.counters.unparsable == 1
    assert one.counters.unanswered == 1 and one.counters.requests == 8


def test_in_flight_counts_requests_the_kernel_holds() -> None:
    """A request whose record the kernel has not sent yet is in flight too (the kernel's
    table says so): waiting for its first response byte, or still writing."""
    t = ConnTracker()
    for fd in (1, 2, 3, 4):
        t.on_http(complete(0, REQ, 1 * MS, 2 * MS, fd=fd))  # one finished request each
    held = {1: 0, 2: 4_900 * MS, 3: 10 * MS}  # fd 4: nothing held
    n = t.in_flight(5_000 * MS, lambda tgid, fd: None, 1.0, lambda tgid, fd, c: held.get(fd))
    assert n == 2
