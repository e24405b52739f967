"""Real eBPF: a request is reported when its response is complete, whatever ends it.

`framing_server.py` writes each response exactly as told (Content-Length in many writes,
chunked with a split terminator, close-delimited, no body, pipelined, bodies by write,
sendto, writev, sendmsg and sendfile) and prints the instants of its reads and last
writes; the kernel's records must match them while the client keeps the connection open.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from test_bpf_probes import Recorder, offline_agent, wait_for, within_bracket

from bpf import loader
from bpf.events import HttpEventKind
from bpf.export import TOKEN_ATTRS
from bpf.model import Unseen, request_model
from kvspread import names
from tests.ports import free_port

pytestmark = [pytest.mark.bpf, pytest.mark.timeout(120)]

HERE = Path(__file__).parent


class Server:
    def __init__(self, port: int) -> None:
        self.port = port
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "framing_server.py"), str(port)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"

    def truth(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        return json.loads(self.proc.stdout.readline())

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def framing(subscribed: Any) -> Iterator[tuple[Server, Recorder]]:
    port = subscribed.traced[3]
    srv = Server(port)
    rec = Recorder(port)
    subscribed.subscribe(rec.on_http, rec.on_accept)
    yield srv, rec
    srv.stop()


def read_response(s: socket.socket, head_only: bool = False) -> bytes:
    """One whole response, read by its own framing (or until close)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    low = head.lower()
    if head_only or b" 204 " in head:
        return head
    if b"content-length:" in low:
        n = int(low.split(b"content-length:")[1].split(b"\r\n")[0])
        while len(body) < n:
            body += s.recv(65536)
    elif b"transfer-encoding: chunked" in low:
        while not body.endswith(b"\r\n0\r\n\r\n"):
            body += s.recv(65536)
    else:
        while chunk := s.recv(65536):
            body += chunk
    return head + b"\r\n\r\n" + body


def get(path: str, method: str = "GET") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: t\r\nX-LLM-Context-ID: {path}\r\n\r\n".encode()


def check(rec: Any, truth: dict[str, Any], sent_ns: int) -> None:
    """Duration from the read that returned the request to its last write."""
    (lo_start, hi_start) = (sent_ns, truth["read"][1])
    (lo_end, hi_end) = truth["last"]
    assert within_bracket(rec.duration_s, lo_end - hi_start, hi_end - lo_start), (rec, truth)


ENDINGS = [
    "/len/20/5/send",
    "/len/6/10/write",
    "/len/6/10/writev",
    "/len/6/10/sendmsg",
    "/len/6/10/sendfile",
    "/chunked/8/5/send",
    "/chunked/4/5/writev",
    "/chunked/4/5/sendmsg",
    "/nobody",
]


@pytest.mark.parametrize("path", ENDINGS)
def test_response_ends_at_its_last_byte_on_an_open_connection(framing: Any, path: str) -> None:
    srv, rec = framing
    with socket.create_connection(("127.0.0.1", srv.port)) as s:
        for i in range(3):
            sent = time.monotonic_ns()
            s.sendall(get(path))
            read_response(s)
            truth = srv.truth()
            # reported while the connection stays open, before any next request
            assert wait_for(lambda i=i: len(rec.records) > i, 5), (path, i, rec.tracker.counters)
            r = rec.records[i]
            assert r.context_id == path and r.status == (204 if path == "/nobody" else 200)
            check(r, truth, sent)
    assert len(rec.records) == 3
    # each request came as one record built in the kernel (its bytes held there until
    # the response ended), not as REQUEST + RESPONSE(_DONE) + END. CLOSE events are left out:
    # the port is shared across tests, and the previous test's connection (its server killed
    # at teardown) or this one's own close can report after the recorder subscribed
    kinds = [k for k in rec.kinds if k is not HttpEventKind.CLOSE]
    assert kinds == [HttpEventKind.COMPLETE] * 3


def test_head_request_ends_after_its_head(framing: Any) -> None:
    srv, rec = framing
    with socket.create_connection(("127.0.0.1", srv.port)) as s:
        sent = time.monotonic_ns()
        s.sendall(get("/len/4/5/send", "HEAD"))
        read_response(s, head_only=True)
        truth = srv.truth()
        assert wait_for(lambda: len(rec.records) == 1, 5), rec.tracker.counters
        assert rec.records[0].method == "HEAD"
        check(rec.records[0], truth, sent)


def test_close_delimited_response_ends_at_its_last_write_reported_at_close(framing: Any) -> None:
    srv, rec = framing
    with socket.create_connection(("127.0.0.1", srv.port)) as s:
        sent = time.monotonic_ns()
        s.sendall(get("/close/300"))
        time.sleep(0.15)
        assert rec.records == []  # nothing says the body is complete before close
        read_response(s)
        truth = srv.truth()
    assert wait_for(lambda: len(rec.records) == 1, 5)
    r = rec.records[0]
    check(r, truth, sent)  # the last write, not the close 300 ms later
    assert r.duration_s < 0.2
    # no length nor chunking: the request's event is sent at the response's first write
    assert rec.kinds == [HttpEventKind.REQUEST, HttpEventKind.RESPONSE, HttpEventKind.CLOSE]


def test_pipelined_requests_each_end_at_their_own_response(framing: Any) -> None:
    srv, rec = framing
    paths = ["/len/2/20/send", "/chunked/2/10/send", "/len/1/30/write"]
    with socket.create_connection(("127.0.0.1", srv.port)) as s:
        sent = time.monotonic_ns()
        s.sendall(b"".join(get(p) for p in paths))  # one write: the server reads them at once
        truths = [srv.truth() for _ in paths]  # written (the client need not read them)
        assert wait_for(lambda: len(rec.records) == 3, 5), rec.tracker.counters
    assert [r.context_id for r in rec.records] == paths
    for r, t in zip(rec.records, truths, strict=True):
        if t["read"] == truths[0]["read"]:  # read together: all start at that read
            check(r, t, sent)
    assert rec.records[0].duration_s < rec.records[1].duration_s < rec.records[2].duration_s
    # the read holding all three is held and sent with the first response's end; the
    # others start at that read (pipelined), with RESPONSE events
    kinds = [k for k in rec.kinds if k is not HttpEventKind.CLOSE]  # as above: shared port
    assert kinds[0] == HttpEventKind.COMPLETE
    assert HttpEventKind.REQUEST not in kinds


def sse_request(path: str, body: bytes | None = None) -> bytes:
    if body is None:
        body = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}'
    return (
        f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"X-LLM-Context-ID: {path}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


@pytest.mark.parametrize(
    "shape",
    ["12/15/1", "9/15/0", "12/10/3", "1/20/1"],
    ids=["one-event-per-write", "events-split-across-writes", "three-events-per-write", "one"],
)
def test_sse_time_to_first_token_and_per_output_token(
    subscribed: Any, framing: Any, shape: str
) -> None:
    """vLLM-shaped chat.completion.chunk streams: TTFT from the request's last byte to the
    write completing the first data event, TPOT the mean gap to the last one ([DONE] not a
    token), against the instants the server took just after each write; then the agent's
    gen_ai.server histograms, /metrics names and the node signal."""
    srv, rec = framing
    agent = offline_agent()
    rec.agent = agent
    tokens, gap_ms, per = (int(x) for x in shape.split("/"))
    path = f"/v1/chat/completions?sse={shape}"
    with socket.create_connection(("127.0.0.1", srv.port)) as s:
        sent = time.monotonic_ns()
        s.sendall(sse_request(path))
        body = read_response(s)
        truth = srv.truth()
        assert wait_for(lambda: len(rec.records) == 1, 5), rec.tracker.counters
    assert body.count(b"chat.completion.chunk") == tokens and b"data: [DONE]" in body
    assert rec.kinds == [HttpEventKind.COMPLETE]  # the whole stream: one record
    r = rec.records[0]
    assert r.streaming and r.status == 200 and r.route == "/v1/chat/completions"
    events = truth["events"]
    assert len(events) == tokens
    read_lo, read_hi = sent, truth["read"][1]
    assert r.ttft_s is not None
    # the first event went out one gap after the request was read, and no earlier
    assert within_bracket(r.ttft_s, events[0] - read_hi - 1_000_000, events[0] - read_lo)
    assert r.ttft_s >= gap_ms / 1000 * 0.9
    if tokens == 1:
        assert r.tpot_s is None  # one token has no inter-token time: absent, not zero
    else:
        assert r.tpot_s is not None
        # each event's write completed between the server's clock readings just before and
        # just after it; on a loaded machine those can be milliseconds apart (preemption)
        (first_lo, first_hi), (last_lo, last_hi) = truth["spans"][0], truth["spans"][-1]
        lo, hi = (last_lo - first_hi) / (tokens - 1), (last_hi - first_lo) / (tokens - 1)
        assert within_bracket(r.tpot_s, int(lo), int(hi)), (r, lo, hi)
        assert r.tpot_s >= gap_ms / 1000 / (per or 1) * 0.5

    # the agent: histograms with the request's attributes + gen_ai.operation.name
    (labels, st), *rest = agent.state.ttft.snapshot().items()
    assert not rest and st.count == 1 and tuple(k for k, _ in labels) == TOKEN_ATTRS
    d = dict(labels)
    assert d[names.ATTR_GEN_AI_OPERATION] == "chat" and d[names.ATTR_HTTP_ROUTE] == r.route
    assert d[names.ATTR_GEN_AI_REQUEST_MODEL] == "m"  # the body's "model"
    assert sum(s.count for s in agent.state.tpot.snapshot().values()) == (tokens > 1)
    text = generate_latest(agent.registry).decode()
    assert "gen_ai_server_time_to_first_token_seconds_count{" in text
    assert ("gen_ai_server_time_per_output_token_seconds_count{" in text) == (tokens > 1)
    # normalized latency: the request's duration over its data events, every stream
    assert r.tokens == tokens
    (nl,) = agent.state.normalized.snapshot().values()
    assert nl.count == 1 and nl.total == pytest.approx(r.duration_s / tokens)
    assert r.duration_s / tokens >= gap_ms / 1000 / (per or 1) * 0.5
    assert "kvspread_gen_ai_server_normalized_latency_seconds_count{" in text
    agent.session = subscribed.session  # BPF up: the node signal is measured
    sig = agent.compute_signals()
    assert sig.ttft_p95_s is not None and abs(sig.ttft_p95_s - r.ttft_s) < 1e-6
    agent.server.httpd.server_close()


def test_request_model_from_the_captured_body(subscribed: Any, framing: Any) -> None:
    """gen_ai.request.model from the bytes the kernel captured: a body naming its model
    within the first 512 bytes has it; openai-python's order (messages, then model) with a
    2 KiB prompt puts it past the capture: absent and counted as past_capture, never a
    guess. (framing_server.py answers at the end of the head, so a body sent in a write of
    its own is not this request's: tests/bpf/test_bpf_model.py joins split reads.)"""
    srv, rec = framing
    agent = offline_agent()
    rec.agent = agent
    path = "/v1/chat/completions?sse=2/1/1"
    prompt = "word " * 400
    late = json.dumps(
        {"messages": [{"role": "user", "content": prompt}], "model": "late", "stream": True}
    ).encode()
    for i, request in enumerate([sse_request(path), sse_request(path, late)]):
        with socket.create_connection(("127.0.0.1", srv.port)) as s:
            s.sendall(request)
            read_response(s)
            srv.truth()
            assert wait_for(lambda n=i + 1: len(rec.records) == n, 5), rec.tracker.counters
    assert [request_model(r.route, r.request) for r in rec.records] == ["m", Unseen.PAST_CAPTURE]
    got = {dict(labels)[names.ATTR_GEN_AI_REQUEST_MODEL]: st.count
           for labels, st in agent.state.ttft.snapshot().items()}  # fmt: skip
    assert got == {"m": 1, "": 1}
    assert agent.state.models == {"named": 1, "past_capture": 1}
    text = generate_latest(agent.registry).decode()
    assert 'kvspread_collector_request_models_total{outcome="past_capture"} 1.0' in text
    assert 'gen_ai_request_model="m"' in text
    agent.server.httpd.server_close()


def test_enter_exit_pairs_where_arguments_are_not_read_at_exit(
    probes: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The programs without ARGS_AT_EXIT (other architectures, kernels before 5.15: the
    enter program keeps the arguments for the exit one) time every ending the same way."""
    monkeypatch.setattr(loader, "args_at_exit_possible", lambda: False)
    assert "-DARGS_AT_EXIT" not in loader.build_cflags(
        loader.ProbeConfig(), loader.detect_features(loader.DEFAULT_TRACEFS)
    )
    port = free_port()
    session = loader.load(loader.ProbeConfig(ports=(port,), header_cache=probes.header_cache))
    rec = Recorder(port)
    session.open_batches(rec.on_http_batch, rec.on_accept)
    srv = Server(port)

    def polled(n: int) -> bool:
        session.poll(20)
        return len(rec.records) >= n

    try:
        with socket.create_connection(("127.0.0.1", port)) as s:
            for i, path in enumerate(ENDINGS):
                sent = time.monotonic_ns()
                s.sendall(get(path))
                read_response(s)
                truth = srv.truth()
                assert wait_for(lambda i=i: polled(i + 1), 5), (path, rec.tracker.counters)
                r = rec.records[i]
                assert r.context_id == path and r.status == (204 if path == "/nobody" else 200)
                check(r, truth, sent)
        assert len(rec.records) == len(ENDINGS)
    finally:
        srv.stop()
        session.close()


def test_a_held_request_is_in_flight_until_its_response_ends(subscribed: Any, framing: Any) -> None:
    """While the kernel holds a request (its COMPLETE record not sent), user space has not
    seen it; the kernel's table says it is in flight, and the tracker counts it."""
    srv, rec = framing
    with socket.create_connection(("127.0.0.1", srv.port)) as s:
        s.sendall(get("/len/1/1/send"))  # one request first: the accept is seen
        read_response(s)
        srv.truth()
        assert wait_for(lambda: len(rec.records) == 1 and rec.accepts, 5)
        acc = rec.accepts[-1]
        assert subscribed.session.conn_held(acc.tgid, acc.fd, acc.conn_id) is None
        s.sendall(get("/len/20/40/send"))  # 20 writes 40 ms apart: about 0.8 s
        time.sleep(0.3)
        last = subscribed.session.conn_held(acc.tgid, acc.fd, acc.conn_id)
        assert last is not None and 0 < time.monotonic_ns() - last < 2e8
        with rec.lock:
            held = subscribed.session.conn_held
            assert rec.tracker.in_flight(time.monotonic_ns(), lambda t, f: None, 1.0, held) == 1
        assert len(rec.records) == 1  # nothing sent to user space yet
        read_response(s)
        srv.truth()
        assert wait_for(lambda: len(rec.records) == 2, 5)
        assert subscribed.session.conn_held(acc.tgid, acc.fd, acc.conn_id) is None
