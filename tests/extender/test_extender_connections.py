"""The extender's connection and body bounds (extender/connections.py, server.py), black-box:
the real `kvspread extender serve` process on `--port 0` (the port read from its start-up
log line), raw sockets as a slow, greedy or hostile client would use them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from extender.config import ExtenderConfig

WAIT_S = 30.0
"""Upper bound on every wait (a hang fails the test; nothing here asserts a duration)."""

BODY = 20_000
"""`server.max_body_bytes` here; `max_bodies_bytes` is the same, so one body fills it."""


class Extender:
    def __init__(self, proc: subprocess.Popen[str], port: int) -> None:
        self.proc, self.port = proc, port
        self.url = f"http://127.0.0.1:{port}"

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=WAIT_S)


def _start(cfg: Path) -> tuple[subprocess.Popen[str], int]:
    """`kvspread extender serve --standalone --port 0 --config cfg`, and the port it got."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVSPREAD_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvspread", "extender", "serve", "--standalone"]
        + ["--port", "0", "--config", str(cfg)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    port = 0
    for line in proc.stderr:  # the start-up line names the port the kernel gave
        if '"extender serving"' in line:
            port = json.loads(line)["port"]
            break
    assert port, "the extender did not start"
    return proc, port


@pytest.fixture(scope="module")
def extender(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Extender]:
    cfg = tmp_path_factory.mktemp("ext") / "extender.yaml"
    cfg.write_text(
        "server:\n  max_connections: 8\n  header_timeout_s: 0.5\n  max_header_bytes: 4096\n"
        "  body_timeout_s: 1.0\n"
        f"  max_body_bytes: {BODY}\n  max_bodies_bytes: {BODY}\n"
    )
    proc, port = _start(cfg)
    try:
        yield Extender(proc, port)
    finally:
        proc.terminate()
        proc.wait(WAIT_S)


def _answer(s: socket.socket) -> tuple[bytes, bytes]:
    """(head, body) of the one answer on `s`, read until the server closes it."""
    raw = b""
    while chunk := s.recv(65536):
        raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    return head, body


def _serves(ext: Extender) -> bool:
    return httpx.get(ext.url + "/healthz", timeout=WAIT_S).status_code == 200


def test_port_0_is_logged_as_the_port_it_got(extender: Extender) -> None:
    assert extender.port > 0 and _serves(extender)


def test_a_connection_over_the_bound_gets_a_json_503_and_the_others_are_served(
    extender: Extender,
) -> None:
    held = []
    try:
        for _ in range(8):  # requests on keep-alive connections: each stays open after
            s = extender.connect()
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _answer_one(s)[0].startswith(b"HTTP/1.1 200 ")
            held.append(s)
        with extender.connect() as s:
            head, body = _answer(s)
        assert head.startswith(b"HTTP/1.1 503 ")
        assert b"retry-after: 1" in head and b"content-type: application/json" in head
        assert "8 connections at once (server.max_connections)" in json.loads(body)["error"]
        held.pop().close()
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:  # the server sees the close on its next turn
            with extender.connect() as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if _answer(s)[0].startswith(b"HTTP/1.1 200 "):
                    break
        else:
            raise AssertionError("a freed slot was not served")
    finally:
        for s in held:
            s.close()


@pytest.mark.parametrize("sent", [b"", b"POST /filter HTTP/1.1\r\nHost: x\r\n"])
def test_a_request_head_that_does_not_arrive_gets_408_and_is_closed(
    extender: Extender, sent: bytes
) -> None:
    with extender.connect() as s:
        s.sendall(sent)  # nothing, or half a head, then nothing (slowloris)
        head, body = _answer(s)
    assert head.startswith(b"HTTP/1.1 408 ")
    assert "within 0.5 s (server.header_timeout_s)" in json.loads(body)["error"]
    assert _serves(extender)


def test_a_body_that_stops_half_way_gets_408_and_frees_its_slot(extender: Extender) -> None:
    """Found black-box: 1,024 connections that each sent a head and one body byte of
    100,000 held every slot (503 to everyone else) and a SIGTERM, for ever."""
    held = []
    try:
        for _ in range(8):  # every slot, each with a body it never finishes
            s = extender.connect()
            s.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\nx")
            held.append(s)
        for s in held:
            head, body = _answer(s)
            assert head.startswith(b"HTTP/1.1 408 "), head
            error = json.loads(body)["error"]
            assert "no whole request body within 1 s of its head (server.body_timeout_s)" in error
    finally:
        for s in held:
            s.close()
    deadline = time.monotonic() + WAIT_S
    while not _serves(extender):  # the slots free as the server sees the closes
        assert time.monotonic() < deadline, "the slots were not freed"
        time.sleep(0.05)
    metrics = httpx.get(extender.url + "/metrics", timeout=WAIT_S).text
    refused = {
        line.split('"')[1]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("kvspread_extender_connections_refused_total{")
    }
    assert set(refused) == {"max_connections", "header_timeout", "body_timeout", "header_too_large"}
    assert refused["body_timeout"] >= 8  # the eight above (other tests' refusals add to theirs)


def test_a_keep_alive_connection_that_starts_a_second_head_and_stops_is_closed(
    extender: Extender,
) -> None:
    with extender.connect() as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        # the whole first answer, by its Content-Length: one recv may end before its body
        # (CI read "ok" in front of the 408)
        assert _answer_one(s)[0].startswith(b"HTTP/1.1 200 ")
        s.sendall(b"GET /healthz HTTP/1.1\r\n")
        head, _ = _answer(s)
    assert head.startswith(b"HTTP/1.1 408 ")


def test_a_request_head_over_the_bound_gets_431(extender: Extender) -> None:
    with extender.connect() as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        try:
            for _ in range(100):  # 1 MB of headers: refused after the first 4 KiB
                s.sendall(b"X-Pad: " + b"a" * 10_000 + b"\r\n")
        except OSError:
            pass  # the server closed its end while the client was still sending
        try:
            head, body = _answer(s)
        except ConnectionResetError:
            pytest.fail("reset before the 431 was read")  # unread bytes made the kernel RST
    assert head.startswith(b"HTTP/1.1 431 ")
    assert "over 4096 bytes (server.max_header_bytes)" in json.loads(body)["error"]
    assert _serves(extender)


def test_bodies_in_flight_are_bounded_over_all_requests(extender: Extender) -> None:
    with extender.connect() as first:
        first.sendall(
            f"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: {BODY}\r\n\r\n".encode()
            + b"{" * (BODY // 2)  # half of its body: the extender holds the budget for it
        )
        deadline = time.monotonic() + WAIT_S
        while True:  # 400 (not JSON) until the extender has read the first head
            r = httpx.post(extender.url + "/prioritize", content=b"x" * 100, timeout=WAIT_S)
            if r.status_code != 400 or time.monotonic() > deadline:
                break
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        assert "(server.max_bodies_bytes); retry later" in r.json()["error"]
        first.sendall(b"{" * (BODY - BODY // 2))
        head, _ = _answer_one(first)
        assert head.startswith(b"HTTP/1.1 400 ")  # not JSON, but it got its turn
    r = httpx.post(extender.url + "/prioritize", content=b"x" * 100, timeout=WAIT_S)
    assert r.status_code == 400  # the budget was given back
    metrics = httpx.get(extender.url + "/metrics", timeout=WAIT_S).text
    assert 'kvspread_extender_requests_total{code="429",verb="prioritize"} 1.0' in metrics


def _answer_one(s: socket.socket) -> tuple[bytes, bytes]:
    """(head, body) of one answer on a keep-alive connection, read by its Content-Length."""
    raw = b""
    while b"\r\n\r\n" not in raw:
        raw += s.recv(65536)
    head, _, body = raw.partition(b"\r\n\r\n")
    length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))
                 .split(b":")[1])  # fmt: skip
    while len(body) < length:
        body += s.recv(65536)
    return head, body


def test_the_bounds_default_and_refuse_bad_values() -> None:
    srv = ExtenderConfig().server
    assert (srv.max_connections, srv.header_timeout_s, srv.max_header_bytes) == (1024, 30, 65536)
    assert srv.body_timeout_s == 60
    assert srv.max_bodies_bytes == 2 * srv.max_body_bytes
    for key, bad in (
        ("max_connections", 0),
        ("header_timeout_s", 0),
        ("body_timeout_s", -1),
        ("max_header_bytes", 100),
        ("max_bodies_bytes", -1),
    ):
        with pytest.raises(ValueError, match=f"server.{key}"):
            ExtenderConfig.from_mapping({"server": {key: bad}})


def test_a_sigterm_is_not_held_for_ever_by_a_client_that_stopped_mid_body(tmp_path: Path) -> None:
    """Found black-box: a SIGTERM waited for a half-sent body until its client closed (a
    rollout waits out its grace period and SIGKILLs). Now the shutdown cuts it after
    `extender.run.SHUTDOWN_GRACE_S` (20 s) and answers it 503, with no traceback."""
    cfg = tmp_path / "extender.yaml"
    cfg.write_text("server:\n  body_timeout_s: 600\n")
    proc, port = _start(cfg)
    assert proc.stderr is not None
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\nx")
            time.sleep(0.2)  # the head is read: the request waits for its body
            proc.terminate()
            head, body = _answer(s)
        assert proc.wait(60) == 143
        assert head.startswith(b"HTTP/1.1 503 ") and b"shutting down" in body
        rest = proc.stderr.read()
        assert "request cut by the shutdown" in rest and "Traceback" not in rest
    finally:
        proc.kill()
        proc.wait()
