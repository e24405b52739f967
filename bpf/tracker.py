"""Turn the kernel's per-connection HTTP events into completed request records.

Pure: fed decoded events in order, returns `RequestRecord`s. A request ends at the write
that completes its response (Content-Length reached, chunked terminator written), which
the kernel reports at once (END, or RESPONSE_DONE when one write holds the whole
response); a response whose end the kernel cannot see (no length nor chunking, head
longer than the capture) ends at its last write, reported with the next request or with
close(). Pipelined requests read in one go are split here from the captured bytes. The
table of open connections is bounded (least recently used connections are dropped and
counted).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from bpf.events import (
    COMPLETE_FIELDS,
    COMPLETE_SSE_AT,
    COMPLETE_SSE_FIELDS,
    HTTP_EVENT_HEADER_SIZE,
    HTTP_HEADER,
    HTTP_KIND_AT,
    RESP_F_EVENT_STREAM,
    AcceptEvent,
    ConnState,
    EventDecodeError,
    HttpEvent,
    HttpEventKind,
    decode_http_event,
)
from bpf.http import (
    RequestHead,
    RequestInfo,
    ResponseInfo,
    RouteTemplates,
    parse_request,
    parse_request_head,
    parse_response,
    request_end,
    with_body,
)

__all__ = ["RequestRecord", "ConnTracker", "TrackerCounters"]

MAX_REQUEST_PREFIX = 4096
MEMO_SIZE = 1024  # parsed request / response prefixes kept (cleared when full)


class RequestRecord(NamedTuple):
    """One completed server-side request. Times in seconds; `start_ns` is monotonic.

    A NamedTuple, not a frozen dataclass: one is built per request, and a frozen
    dataclass's __init__ costs several times more."""

    tgid: int
    port: int
    method: str
    route: str
    status: int | None
    modality: str
    images: int
    start_ns: int
    ttfb_s: float
    duration_s: float
    streaming: bool
    response_bytes: int
    context_id: str | None = None
    chunk_seq: int | None = None
    peer: str = ""
    # SSE streams (text/event-stream), timed on the wire: last request byte -> first data
    # event, and the mean gap between data events; None when not seen (not a stream, no
    # data event, one event only for the latter, or bytes the kernel could not scan)
    ttft_s: float | None = None
    tpot_s: float | None = None
    # the captured bytes of the request up to the first gap (see _Pending.gap): where
    # bpf/model.py reads gen_ai.request.model, for token streams only
    request: bytes = b""
    # data events of an SSE stream (its output tokens, `data: [DONE]` excluded); 0 when
    # not a stream or not seen: duration_s / tokens is the request's normalized latency
    tokens: int = 0


_new_record = tuple.__new__
_REQUEST = int(HttpEventKind.REQUEST)
_RESPONSE_DONE = int(HttpEventKind.RESPONSE_DONE)
_COMPLETE = int(HttpEventKind.COMPLETE)
_MAX_STATE = max(int(s) for s in ConnState)


def _record(
    c: _Conn,
    req: RequestInfo,
    resp: ResponseInfo,
    start_ns: int,
    ttfb_s: float,
    duration_s: float,
    resp_bytes: int,
    ttft_s: float | None = None,
    tpot_s: float | None = None,
    request: bytes = b"",
    tokens: int = 0,
) -> RequestRecord:
    """tuple.__new__ with the fields in order: one record per request, and the
    NamedTuple constructor's keyword handling was a quarter of the tracker's time."""
    return _new_record(
        RequestRecord,
        (c.tgid, c.port, req.method, req.route, resp.status, req.modality, req.images,
         start_ns, ttfb_s, duration_s, resp.streaming, resp_bytes, req.context_id,
         req.chunk_seq, c.peer, ttft_s, tpot_s, request, tokens),
    )  # fmt: skip


def _token_times(
    request_end_ns: int, first: int, last: int, events: int
) -> tuple[float, float | None]:
    """Time to first token and per output token of an SSE stream with `events` data
    events, the first and last completed at `first` and `last` (ns)."""
    ttft = max(0, first - request_end_ns) / 1e9
    return ttft, ((last - first) / (events - 1) / 1e9 if events > 1 else None)


@dataclass(slots=True)
class _Pending:
    start_ns: int
    request: bytes
    response_ns: int = 0
    response: bytes = b""
    request_end_ns: int = 0  # last read before the response
    info: ResponseInfo | None = None  # COMPLETE: read from the head in the kernel
    # bytes of `request` read whole: a read longer than the capture leaves a gap after its
    # bytes, so the next read's bytes do not continue them (None: no gap)
    gap: int | None = None


@dataclass(slots=True)
class _Conn:
    tgid: int
    fd: int
    port: int
    peer: str = ""
    pending: _Pending | None = None
    leftover: bytes = b""  # captured bytes past the last request: pipelined requests
    leftover_gap: int | None = None  # _Pending.gap of `leftover`
    answered: bool = False  # a response ended on this connection


@dataclass
class TrackerCounters:
    requests: int = 0
    unanswered: int = 0  # request seen, connection closed before any response
    unparsable: int = 0  # bytes that were not an HTTP request line
    evicted: int = 0  # connections dropped from the bounded table
    orphan_events: int = 0  # events of connections not seen starting
    pipelined_unseen: int = 0  # pipelined responses whose request was past the capture


@dataclass
class ConnTracker:
    """State of open connections, keyed by (tgid, fd, accept time)."""

    routes: RouteTemplates = field(default_factory=RouteTemplates)
    max_conns: int = 65536
    counters: TrackerCounters = field(default_factory=TrackerCounters)

    def __post_init__(self) -> None:
        self._conns: OrderedDict[tuple[int, int, int], _Conn] = OrderedDict()
        self._req_memo: dict[bytes, tuple[RequestInfo | None, int | None]] = {}
        self._resp_memo: dict[bytes, ResponseInfo] = {}
        self._head_memo: dict[bytes, RequestHead | None] = {}
        self._info_memo: dict[int, ResponseInfo] = {}  # status << 8 | flags

    def __len__(self) -> int:
        return len(self._conns)

    def _conn(self, tgid: int, fd: int, conn_id: int, port: int) -> _Conn:
        key = (tgid, fd, conn_id)
        c = self._conns.get(key)
        if c is None:
            c = _Conn(tgid=tgid, fd=fd, port=port)
            self._conns[key] = c
            while len(self._conns) > self.max_conns:
                self._conns.popitem(last=False)
                self.counters.evicted += 1
        else:
            self._conns.move_to_end(key)
        return c

    def _parse_request(self, data: bytes) -> tuple[RequestInfo | None, int | None]:
        """The request in `data` and where a pipelined one after it starts (None: no
        split). Memoized on the bytes: identical request prefixes (health checks, scrapes,
        repeated prompts) are parsed once; parsing is deterministic given the bytes. The
        head is memoized apart: different prompts behind the same head sniff only their
        body."""
        hit = self._req_memo.get(data)
        if hit is not None:
            return hit
        end = data.find(b"\r\n\r\n")
        head_bytes = data if end < 0 else data[: end + 4]
        memo = self._head_memo
        if head_bytes in memo:
            head = memo[head_bytes]
        else:
            head = parse_request_head(head_bytes, self.routes)
            if len(memo) >= MEMO_SIZE:
                memo.clear()
            memo[head_bytes] = head
        req = None if head is None else with_body(head, b"" if end < 0 else data[end + 4 :])
        cut = None
        if req is not None and len(data) > data.find(b"\r\n\r\n") + 4 + (req.content_length or 0):
            # bytes past this request: a pipelined one (rare), or a body without its length
            cut = request_end(data)
            if cut is not None:
                req = parse_request(data[:cut], self.routes)
        if len(self._req_memo) >= MEMO_SIZE:
            self._req_memo.clear()
        self._req_memo[data] = (req, cut)
        return req, cut

    def on_accept(self, ev: AcceptEvent) -> None:
        c = self._conn(ev.tgid, ev.fd, ev.conn_id, ev.port)
        c.peer = ev.peer

    def _finish(
        self, c: _Conn, end_ns: int, resp_bytes: int, sse: tuple[int, int, int] = (0, 0, 0)
    ) -> RequestRecord | None:
        """The record of `c`'s pending request ending at `end_ns`; `sse` is the ending
        event's (first data event ns, last data event ns, data events)."""
        p = c.pending
        c.pending = None
        if p is None:
            return None
        c.answered = True
        if not p.response_ns:
            self.counters.unanswered += 1
            return None
        data = p.request
        req, cut = self._parse_request(data)
        if cut is not None:
            c.leftover = data[cut:]
            c.leftover_gap = None if p.gap is None else max(0, p.gap - cut)
        if req is None:
            self.counters.unparsable += 1
            return None
        whole = len(data) if cut is None else cut
        if p.gap is not None and p.gap < whole:
            whole = p.gap
        request = data if whole == len(data) else data[:whole]
        resp = p.info if p.info is not None else self._resp_memo.get(p.response)
        if resp is None:
            resp = parse_response(p.response)
            if len(self._resp_memo) >= MEMO_SIZE:
                self._resp_memo.clear()
            self._resp_memo[p.response] = resp
        end = max(end_ns, p.response_ns)
        self.counters.requests += 1
        ttft = tpot = None
        tokens = 0
        if sse[2] and resp.streaming and p.request_end_ns:
            ttft, tpot = _token_times(p.request_end_ns, *sse)
            tokens = sse[2]
        ttfb = (p.response_ns - p.start_ns) / 1e9
        took = (end - p.start_ns) / 1e9
        return _record(
            c, req, resp, p.start_ns, ttfb, took, resp_bytes, ttft, tpot, request, tokens
        )

    def on_http(self, ev: HttpEvent) -> list[RequestRecord]:
        """Feed one event; returns the requests it completed (zero or one)."""
        key = (ev.tgid, ev.fd, ev.conn_id)
        kind = ev.kind
        if kind == HttpEventKind.CLOSE:
            c = self._conns.pop(key, None)
            return [] if c is None else self._done(c, ev.prev_end_ns, ev.prev_resp_bytes, ev)
        c = self._conn(ev.tgid, ev.fd, ev.conn_id, ev.port)
        if kind == HttpEventKind.COMPLETE:
            return self._complete(c, ev)
        if kind == HttpEventKind.END:
            return self._done(c, ev.prev_end_ns, ev.prev_resp_bytes, ev)
        out: list[RequestRecord] = []
        if kind == HttpEventKind.REQUEST:
            if c.pending is not None:
                out = self._done(c, ev.prev_end_ns, ev.prev_resp_bytes, ev)
            c.pending = _Pending(start_ns=ev.ts_ns, request=ev.data)
            if ev.total > len(ev.data):
                c.pending.gap = len(ev.data)
            c.leftover = b""
        elif kind == HttpEventKind.REQUEST_MORE:
            p = c.pending
            if p is None:
                self.counters.orphan_events += 1
            elif len(p.request) < MAX_REQUEST_PREFIX:
                p.request += ev.data[: MAX_REQUEST_PREFIX - len(p.request)]
                if p.gap is None and ev.total > len(ev.data):
                    p.gap = len(p.request)
        else:  # RESPONSE, RESPONSE_DONE
            if c.pending is None and c.answered and ev.prev_state == ConnState.IDLE:
                # pipelined: a response with no read since the last one ended
                if not c.leftover:
                    self.counters.pipelined_unseen += 1
                    return out
                c.pending = _Pending(start_ns=ev.prev_end_ns, request=c.leftover)
                c.pending.gap = c.leftover_gap
                c.leftover = b""
            if c.pending is None:
                self.counters.orphan_events += 1
            elif not c.pending.response_ns:
                c.pending.response_ns = ev.ts_ns
                c.pending.response = ev.data
                c.pending.request_end_ns = ev.req_end_ns
            if kind == HttpEventKind.RESPONSE_DONE:
                out += self._done(c, ev.ts_ns, ev.prev_resp_bytes, ev)
        return out

    def _response_info(self, status: int, flags: int) -> ResponseInfo:
        """The ResponseInfo of a COMPLETE record's status and flags (few distinct ones)."""
        key = status << 8 | flags
        info = self._info_memo.get(key)
        if info is None:
            info = ResponseInfo(status=status or None, streaming=bool(flags & RESP_F_EVENT_STREAM))
            self._info_memo[key] = info
        return info

    def _complete(self, c: _Conn, ev: HttpEvent) -> list[RequestRecord]:
        """A COMPLETE record: what a REQUEST followed by the events ending its response
        (RESPONSE_DONE, or RESPONSE then END) would give, the response read in the kernel."""
        out = self._done(c, 0, 0) if c.pending is not None else []
        c.pending = _Pending(
            ev.ts_ns, ev.data, ev.resp_ns, b"", ev.req_end_ns,
            self._response_info(ev.status, ev.flags),
        )  # fmt: skip
        c.leftover = b""
        return out + self._done(c, ev.prev_end_ns, ev.prev_resp_bytes, ev)

    def _done(
        self, c: _Conn, end_ns: int, resp_bytes: int, ev: HttpEvent | None = None
    ) -> list[RequestRecord]:
        sse = (0, 0, 0) if ev is None else (ev.sse_first_ns, ev.sse_last_ns, ev.sse_events)
        rec = self._finish(c, end_ns, resp_bytes, sse)
        return [rec] if rec else []

    def on_http_raw(self, raws: list[bytes]) -> tuple[list[RequestRecord], int]:
        """Feed a poll's worth of encoded events; returns the requests they completed and
        how many events did not decode.

        The two events of most requests (REQUEST on a connection with nothing pending,
        RESPONSE_DONE answering it) are handled here from the unpacked header, without
        an `HttpEvent` or the general dispatch: exactly what `on_http` does for them,
        at a fraction of the Python work. Every other event goes through `on_http`."""
        out: list[RequestRecord] = []
        bad = 0
        conns = self._conns
        unpack = HTTP_HEADER.unpack_from
        head = HTTP_EVENT_HEADER_SIZE
        finish = self._finish
        req_memo, resp_memo, info_memo = self._req_memo, self._resp_memo, self._info_memo
        parsed: tuple[RequestInfo | None, int | None] | None
        resp: ResponseInfo | None
        parse = self._parse_request
        unpack_complete, unpack_sse = COMPLETE_FIELDS.unpack_from, COMPLETE_SSE_FIELDS.unpack_from
        kind_at, sse_at = HTTP_KIND_AT, COMPLETE_SSE_AT
        done = 0  # requests completed by the fast path (added to the counter once)
        for raw in raws:
            if len(raw) >= head:
                if raw[kind_at] == _COMPLETE:
                    # one record per request, the kernel's usual case: `_complete` with
                    # nothing pending, no pipelined bytes, the request parsable
                    ts, conn, end_ns, prev_bytes, tgid, fd, n, resp_ns, status, flags = (
                        unpack_complete(raw)
                    )
                    key = (tgid, fd, conn)
                    c = conns.get(key)
                    if c is not None and c.pending is None and resp_ns:
                        data = raw[head : head + n]
                        parsed = req_memo.get(data) or parse(data)
                        req = parsed[0]
                        if req is not None and parsed[1] is None:
                            conns.move_to_end(key)
                            c.answered = True
                            c.leftover = b""
                            resp = info_memo.get(status << 8 | flags) or self._response_info(
                                status, flags
                            )
                            ttft = tpot = None
                            tokens = 0
                            if flags & RESP_F_EVENT_STREAM:
                                req_end, first, last, events = unpack_sse(raw, sse_at)
                                if events and req_end:
                                    ttft, tpot = _token_times(req_end, first, last, events)
                                    tokens = events
                            done += 1
                            out.append(
                                _record(c, req, resp, ts, (resp_ns - ts) / 1e9,
                                        ((end_ns if end_ns > resp_ns else resp_ns) - ts) / 1e9,
                                        prev_bytes, ttft, tpot, data, tokens)
                            )  # fmt: skip
                            continue
                else:
                    (ts, conn, _pe, prev_bytes, req_end, first, last, tgid, fd, n, total, _p, kind,
                     prev, sse_events, _r, _s, _f) = unpack(raw)  # fmt: skip
                    if prev <= _MAX_STATE and (kind == _REQUEST or kind == _RESPONSE_DONE):
                        key = (tgid, fd, conn)
                        c = conns.get(key)
                        if c is not None:
                            p = c.pending
                            if kind == _REQUEST and p is None:
                                conns.move_to_end(key)
                                c.pending = _Pending(ts, raw[head : head + n])
                                if total > n:
                                    c.pending.gap = n
                                c.leftover = b""
                                continue
                            if kind == _RESPONSE_DONE and p is not None and not p.response_ns:
                                conns.move_to_end(key)
                                parsed = req_memo.get(p.request)
                                resp = resp_memo.get(raw[head : head + n])
                                if (
                                    parsed is not None
                                    and parsed[1] is None
                                    and resp is not None
                                    and (req := parsed[0]) is not None
                                    and not (sse_events and resp.streaming)
                                ):
                                    # request and response seen before, no pipelining, no
                                    # token stream: `_finish`'s record, built here
                                    c.pending = None
                                    c.answered = True
                                    done += 1
                                    took = (ts - p.start_ns) / 1e9
                                    data = p.request if p.gap is None else p.request[: p.gap]
                                    out.append(
                                        _record(c, req, resp, p.start_ns, took, took,
                                                prev_bytes, None, None, data)
                                    )  # fmt: skip
                                    continue
                                p.response_ns = ts
                                p.response = raw[head : head + n]
                                p.request_end_ns = req_end
                                rec = finish(c, ts, prev_bytes, (first, last, sse_events))
                                if rec is not None:
                                    out.append(rec)
                                continue
            try:
                ev = decode_http_event(raw)
            except EventDecodeError:
                bad += 1
                continue
            out += self.on_http(ev)
        self.counters.requests += done
        return out, bad

    def in_flight(
        self,
        now_ns: int,
        last_write_ns: Callable[[int, int], int | None],
        idle_s: float = 1.0,
        held: Callable[[int, int, int], int | None] | None = None,
    ) -> int:
        """Requests in flight: awaiting their first response byte, or still writing.

        A response counts as still writing when its connection wrote within `idle_s`
        (`last_write_ns(tgid, fd)` reads the kernel's table), so an idle keep-alive
        connection after a finished response is not counted. A request the kernel still
        holds (its COMPLETE record not sent) is seen only there: `held(tgid, fd, conn_id)`
        gives 0 while it awaits its first response byte, its last write once responding,
        None when the connection holds none.
        """
        n = 0
        idle_ns = idle_s * 1e9
        for (_, _, conn_id), c in self._conns.items():
            p = c.pending
            if p is None:
                if held is not None:
                    last = held(c.tgid, c.fd, conn_id)
                    if last is not None and (last == 0 or now_ns - last <= idle_ns):
                        n += 1
                continue
            if not p.response_ns:
                n += 1
                continue
            last = last_write_ns(c.tgid, c.fd)
            if last is not None and now_ns - last <= idle_ns:
                n += 1
        return n
