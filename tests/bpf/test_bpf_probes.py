"""Real eBPF: requests, streams, accept queues and TCP statistics measured in the kernel
and compared with the truth measured inside the servers."""

from __future__ import annotations

import collections
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bpf.agent import Agent
from bpf.config import BpfConfig, CollectorConfig, NvmlConfig
from bpf.events import HttpEventKind, decode_accept_event, decode_http_event
from bpf.export import REQUEST_ATTRS
from bpf.tracker import ConnTracker, RequestRecord
from kvspread import names
from tests.bpf.conftest import wait_for

pytestmark = [pytest.mark.bpf, pytest.mark.timeout(120)]

HERE = Path(__file__).parent


def offline_agent() -> Agent:
    """A standalone collector with BPF and NVML off: the test feeds it the events."""
    return Agent(
        CollectorConfig(
            port=0,
            listen="127.0.0.1",
            standalone=True,
            bpf=BpfConfig(enabled=False),
            nvml=NvmlConfig(enabled=False),
        )
    )


@pytest.fixture
def uvicorn_server(tmp_path: Path) -> Iterator[Any]:
    """Start `collector_app` under uvicorn on a given port; yields a starter."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(port: int) -> Path:
        truth = tmp_path / f"truth-{port}.jsonl"
        truth.write_text("")
        env = {**os.environ, "KVSPREAD_TEST_TRUTH": str(truth)}
        p = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "collector_app:app",
                "--app-dir",
                str(HERE),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--http",
                "collector_app:StampedH11",
                "--loop",
                "asyncio",
                "--log-level",
                "warning",
                "--no-access-log",
            ],
            env=env,
        )
        procs.append(p)

        def up() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return True
            except OSError:
                return False

        assert wait_for(up, 20), "uvicorn did not start"
        return truth

    yield start
    for p in procs:
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


class Recorder:
    """Feeds kernel events to a ConnTracker and an Agent, keeping completed records."""

    def __init__(self, port: int, agent: Agent | None = None) -> None:
        self.port = port
        self.tracker = ConnTracker()
        self.records: list[RequestRecord] = []
        self.kinds: list[HttpEventKind] = []  # of the events on this port, in order
        self.accepts: list[Any] = []
        self.agent = agent
        self.lock = threading.Lock()

    def on_http(self, raw: bytes) -> None:
        ev = decode_http_event(raw)
        if ev.port != self.port:
            return
        with self.lock:
            # a close before any other event is an earlier test's connection on the shared
            # port, delivered late on a loaded machine (it made [CLOSE, COMPLETE] of a
            # test's [COMPLETE]); the tracker ignores it too: it never saw that connection
            if not (ev.kind is HttpEventKind.CLOSE and not self.kinds):
                self.kinds.append(ev.kind)
            self.records.extend(self.tracker.on_http(ev))
        if self.agent:
            self.agent.on_http_bytes(raw)

    def on_http_batch(self, raws: list[bytes]) -> None:
        for raw in raws:
            self.on_http(raw)

    def on_accept(self, raw: bytes) -> None:
        ev = decode_accept_event(raw)
        if ev.port != self.port:
            return
        with self.lock:
            self.accepts.append(ev)
            self.tracker.on_accept(ev)
        if self.agent:
            self.agent.on_accept_bytes(raw)


def truths(path: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for line in path.read_text().splitlines():
        d = json.loads(line)
        out[d["id"]] = d
    return out


MODALITY_BODIES = {
    "text": ({}, [{"role": "user", "content": "hello"}]),
    "image": (
        {},
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ],
            }
        ],
    ),
    "multi-image": (
        {},
        [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}},
                    {"type": "image_url", "image_url": {"url": "https://example.invalid/b.png"}},
                ],
            }
        ],
    ),
    "audio": ({"X-Modality": "audio"}, [{"role": "user", "content": "transcribe"}]),
}


def within(measured_s: float, truth_ns: int) -> bool:
    truth = truth_ns / 1e9
    return abs(measured_s - truth) <= max(0.001, 0.05 * truth)


def within_bracket(measured_s: float, lo_ns: int, hi_ns: int) -> bool:
    """Within max(1 ms, 5 %) of a truth known only to lie between lo and hi.

    The server's clocks bracket each instant: the request arrived after the client sent it
    and no later than uvicorn's data_received stamp; a response byte went out between the
    instants just before and just after the ASGI send (which writes to the socket). On an
    idle machine the brackets are tens of microseconds wide; on a loaded one a process can
    be preempted for milliseconds between the kernel event and its own clock reading.
    """
    tol = max(0.001, 0.05 * hi_ns / 1e9)
    return lo_ns / 1e9 - tol <= measured_s <= hi_ns / 1e9 + tol


def check_timing(r: RequestRecord, t: dict[str, Any], sent_ns: int) -> None:
    """Duration and time to first byte against the server's bracketed truth."""
    assert within_bracket(r.duration_s, t["end_before"] - t["start"], t["end"] - sent_ns), (
        r.duration_s,
        t,
        sent_ns,
    )
    assert within_bracket(r.ttfb_s, t["first_before"] - t["start"], t["first"] - sent_ns), (
        r.ttfb_s,
        t,
        sent_ns,
    )


def test_keepalive_requests_counted_and_timed(subscribed: Any, uvicorn_server: Any) -> None:
    port = subscribed.traced[0]
    truth_file = uvicorn_server(port)
    agent = offline_agent()
    rec = Recorder(port, agent)
    subscribed.subscribe(rec.on_http, rec.on_accept)

    delays = (20, 45, 70)
    statuses = (200, 200, 400, 503)
    modalities = tuple(MODALITY_BODIES)
    n = 24
    plan: collections.Counter[tuple[str, str, str]] = collections.Counter()
    sent: dict[str, int] = {}
    clients = [httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) for _ in range(2)]
    try:
        for i in range(n):
            mod = modalities[i % len(modalities)]
            status = statuses[i % len(statuses)]
            headers, messages = MODALITY_BODIES[mod]
            body = {"model": "m", "messages": messages, "delay_ms": delays[i % 3], "status": status}
            sent[f"req-{i}"] = time.monotonic_ns()
            r = clients[i % 2].post(
                "/v1/chat/completions",
                json=body,
                headers={**headers, "X-LLM-Context-ID": f"req-{i}", "X-Chunk-Seq": str(i)},
            )
            assert r.status_code == status
            plan[("/v1/chat/completions", str(status), mod)] += 1
    finally:
        for c in clients:
            c.close()

    assert wait_for(lambda: len(rec.records) >= n), f"only {len(rec.records)} of {n} requests"
    time.sleep(0.2)
    assert len(rec.records) == n
    truth = truths(truth_file)
    seen: collections.Counter[tuple[str, str, str]] = collections.Counter()
    for r in rec.records:
        assert r.context_id is not None and r.context_id in truth, r
        t = truth[r.context_id]
        assert r.chunk_seq == int(r.context_id.split("-")[1])
        assert r.method == "POST" and r.status == t["status"]
        check_timing(r, t, sent[r.context_id])
        assert r.duration_s >= delays[int(r.context_id.split("-")[1]) % 3] / 1000
        assert r.peer == "127.0.0.1"
        seen[(r.route, str(r.status), r.modality)] += 1
    assert seen == plan

    # The agent path (labels, histograms) reports exactly the same counts.
    got: collections.Counter[tuple[str, str, str]] = collections.Counter()
    for labels, st in agent.state.requests.snapshot().items():
        d = dict(labels)
        assert tuple(k for k, _ in labels) == REQUEST_ATTRS
        got[(d[names.ATTR_HTTP_ROUTE], d[names.ATTR_HTTP_STATUS], d[names.ATTR_MODALITY])] += (
            st.count
        )
    assert got == plan
    # Two keep-alive connections: two accepts, each queued briefly.
    assert len(rec.accepts) >= 2  # two keep-alive clients (+ the readiness probe)
    # TCP statistics of the server's connections were aggregated in the kernel.
    stats = subscribed.session.read_tcp_stats()
    mine = [s for (tgid, p), s in stats.items() if p == port]
    assert mine and sum(s.rtt_count for s in mine) > 0
    agent.server.httpd.server_close()


def test_sse_stream_ends_at_last_chunk(subscribed: Any, uvicorn_server: Any) -> None:
    port = subscribed.traced[1]
    truth_file = uvicorn_server(port)
    rec = Recorder(port)
    subscribed.subscribe(rec.on_http, rec.on_accept)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
        body = {"messages": [], "delay_ms": 30, "chunks": 6, "chunk_ms": 25}
        sent = time.monotonic_ns()
        with c.stream(
            "POST", "/v1/chat/completions", json=body, headers={"X-LLM-Context-ID": "stream-1"}
        ) as r:
            events = [line for line in r.iter_lines() if line.startswith("data:")]
        assert len(events) == 7
        # the next request on the same connection ends the stream's measurement
        c.get("/v1/models/abc123", headers={"X-LLM-Context-ID": "models-1"})
        time.sleep(0.3)  # a finished response waits for the next request or close
        # the kernel table holds the connection's last write (used for streams in flight)
        assert wait_for(lambda: len(rec.accepts) >= 1)
        acc = rec.accepts[-1]
        last = subscribed.session.conn_last_write_ns(acc.tgid, acc.fd)
        assert last is not None and 0 < time.monotonic_ns() - last < 2e9
    assert wait_for(lambda: len(rec.records) >= 2)
    truth = truths(truth_file)
    by_id = {r.context_id: r for r in rec.records}
    s = by_id["stream-1"]
    assert s.streaming and s.status == 200
    t = truth["stream-1"]
    check_timing(s, t, sent)
    assert s.duration_s >= 0.030 + 6 * 0.025
    m = by_id["models-1"]
    assert m.method == "GET" and m.route == "/v1/models/{model}" and m.status == 200


def test_untraced_port_is_filtered_in_kernel(subscribed: Any, uvicorn_server: Any) -> None:
    port = subscribed.untraced
    uvicorn_server(port)
    rec = Recorder(port)
    subscribed.subscribe(rec.on_http, rec.on_accept)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
        for _ in range(3):
            c.post("/v1/chat/completions", json={"delay_ms": 1})
    time.sleep(0.5)
    assert rec.records == [] and rec.accepts == []


def test_accept_queue_delay_and_backlog(subscribed: Any) -> None:
    port = subscribed.traced[2]
    delay_s, count = 0.05, 4
    rec = Recorder(port)
    subscribed.subscribe(rec.on_http, rec.on_accept)
    srv = subprocess.Popen(
        [sys.executable, str(HERE / "slow_accept_server.py"), str(port), str(delay_s), str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert srv.stdout is not None and srv.stdin is not None
        assert srv.stdout.readline().strip() == "ready"
        clients, connected = [], []
        for _ in range(count):
            before = time.monotonic_ns()
            s = socket.create_connection(("127.0.0.1", port))
            connected.append((before, time.monotonic_ns()))  # handshake done: queued
            clients.append(s)
        srv.stdin.write("go\n")
        srv.stdin.flush()
        accepted = [tuple(map(int, srv.stdout.readline().split())) for _ in range(count)]
        srv.wait(timeout=10)
    finally:
        if srv.poll() is None:
            srv.kill()
    for s in clients:
        s.close()
    assert wait_for(lambda: len(rec.accepts) >= count)
    evs = sorted(rec.accepts, key=lambda e: e.ts_ns)
    for ev, (c0, c1), (a0, a1) in zip(evs, connected, accepted, strict=True):
        assert a0 - c1 > delay_s * 1e9 * 0.9
        assert within_bracket(ev.queue_ns / 1e9, a0 - c1, a1 - c0), (ev.queue_ns, c0, c1, a0, a1)
        assert ev.max_backlog == 64
    # the first accept() found every connection waiting in the queue
    assert evs[0].backlog == count
    assert [e.backlog for e in evs] == list(range(count, 0, -1))


def test_request_budget_bounds_events_and_keeps_sampled_timings_right(
    probes: Any, uvicorn_server: Any, tmp_path: Path
) -> None:
    """Over bpf.max_requests_per_s the kernel hands no event over but still puts the request
    in its own duration histogram; the requests it does hand over keep exact timings."""
    from bpf import loader

    with socket.socket() as probe_sock:
        probe_sock.bind(("127.0.0.1", 0))
        port = int(probe_sock.getsockname()[1])
    session = loader.load(
        loader.ProbeConfig(ports=(port,), header_cache=probes.header_cache, max_requests_per_s=4)
    )
    try:
        rec = Recorder(port)
        session.open_batches(rec.on_http_batch, rec.on_accept)
        truth_file = uvicorn_server(port)
        sent: dict[str, int] = {}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
            for i in range(12):
                sent[f"b-{i}"] = time.monotonic_ns()
                c.post(
                    "/v1/chat/completions",
                    json={"delay_ms": 5},
                    headers={"X-LLM-Context-ID": f"b-{i}"},
                )
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(rec.records) < 4:
            session.poll(50)
        session.poll(50)
        lost = session.lost_events()

        def unsampled() -> tuple[int, int]:
            mine = [h for (_, p), h in session.read_unsampled().items() if p == port]
            return sum(h.rtt_count for h in mine), sum(h.rtt_sum_us for h in mine)

        # the client closed: the server's close() ends the last unsampled request
        assert wait_for(lambda: unsampled()[0] == lost["budget"], 5), (unsampled(), lost)
        count, sum_us = unsampled()
    finally:
        session.close()
    assert 1 <= len(rec.records) <= 5  # one window of 4 (+1 if the test spans two windows)
    assert lost["budget"] == 12 - len(rec.records)
    # every request over the budget is still in the kernel's histogram, with its duration
    # (each took at least its 5 ms server delay)
    assert count == 12 - len(rec.records) and sum_us >= count * 5000
    truth = truths(truth_file)
    for r in rec.records:
        assert r.context_id is not None
        check_timing(r, truth[r.context_id], sent[r.context_id])


def test_http_ring_read_through_callbacks_off_x86(
    probes: Any, uvicorn_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where plain loads may be reordered (arm64) the HTTP ring is read through bcc's
    callbacks, not its memory map: the same batches, the same records."""
    from bpf import loader

    monkeypatch.setattr(loader.platform, "machine", lambda: "aarch64")
    with socket.socket() as probe_sock:
        probe_sock.bind(("127.0.0.1", 0))
        port = int(probe_sock.getsockname()[1])
    session = loader.load(loader.ProbeConfig(ports=(port,), header_cache=probes.header_cache))
    try:
        rec = Recorder(port)
        session.open_batches(rec.on_http_batch, rec.on_accept)
        assert session._ring is None  # no direct read
        uvicorn_server(port)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
            for _ in range(3):
                assert c.get("/v1/models/m").status_code == 200
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(rec.records) < 3:
            session.poll(50)
    finally:
        session.close()
    assert [(r.method, r.route, r.status) for r in rec.records] == [
        ("GET", "/v1/models/{model}", 200)
    ] * 3
