"""SIGTERM always ends the picker: after `--drain-timeout` every stream and connection still
open is cut and the process exits, whatever its peers do. A `kvspread router serve` process
of its own, on each gRPC server, with peers that never finish: an idle HTTP/2 connection
that never reads, a stalled upload (a Process stream whose gRPC message never completes), a
TCP connection that never says a word, and a keep-alive HTTP/1.1 client of /metrics. Then
the signal itself: one the kernel hands to a thread other than the main one (the picker
used to miss it until a second came: issue 27), and a second signal during a drain, which
exits at once."""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import socket
import struct
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import hpack
import httpx
import pytest

from router.config import GRPC_SERVERS
from router.extproc import PROCESS_PATH
from tests.router.conftest import picker_subprocess, wait
from tests.router.fake_engine import FakeEngine

Engines = Callable[..., list[FakeEngine]]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HEADERS, DATA, SETTINGS, PING = 0x1, 0x0, 0x4, 0x6
END_HEADERS = 0x4
EXIT_BOUND_S = 30.0
"""How long the test waits for the exit (a drain of 1 s, then the cut): a hang, not a figure."""


def _not_ready(http: str) -> bool:
    try:
        return httpx.get(f"{http}/readyz", timeout=2).status_code == 503
    except httpx.HTTPError:
        return False


def frame(kind: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", sid)
        + payload
    )


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a peer that reads nothing
    return s


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        got = s.recv(n - len(out))
        assert got, "the picker closed the connection"
        out += got
    return out


def idle_h2(port: int) -> socket.socket:
    """An HTTP/2 connection the picker has taken (its SETTINGS came), then never read."""
    s = _connect(port)
    s.sendall(PREFACE + frame(SETTINGS, 0, 0))
    head = _recv_exactly(s, 9)
    assert head[3] == SETTINGS
    _recv_exactly(s, int.from_bytes(head[:3], "big"))
    return s


def stalled_upload(port: int) -> socket.socket:
    """A Process stream: headers, then 10 bytes of a message announced as 1 MiB; no more."""
    s = idle_h2(port)
    block = hpack.Encoder().encode(
        [(":method", "POST"), (":scheme", "http"), (":path", PROCESS_PATH),
         (":authority", "picker"), ("content-type", "application/grpc"), ("te", "trailers")]
    )  # fmt: skip
    msg = b"\x00" + struct.pack(">I", 1 << 20) + b"\x0a" * 10
    ping = frame(PING, 0, 0, b"stalled!")
    s.sendall(frame(HEADERS, END_HEADERS, 1, block) + frame(DATA, 0, 1, msg) + ping)
    while True:  # frames are read in order: the PING's ACK means the stream was taken
        head = _recv_exactly(s, 9)
        body = _recv_exactly(s, int.from_bytes(head[:3], "big"))
        if head[3] == PING and head[4] & 0x1 and body == b"stalled!":
            return s


def silent_tcp(port: int) -> socket.socket:
    return _connect(port)


def metrics_keepalive(http_port: int) -> socket.socket:
    """A scrape answered (its status line read), the connection then kept open."""
    s = _connect(http_port)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: picker\r\n\r\n")
    assert _recv_exactly(s, 12) == b"HTTP/1.1 200"
    return s


@pytest.mark.parametrize("kind", GRPC_SERVERS)
def test_sigterm_cuts_peers_that_never_finish_after_the_drain_timeout(
    tmp_path: Path, engines: Engines, kind: str
) -> None:
    (engine,) = engines("e")
    with (
        ExitStack() as held,
        picker_subprocess(tmp_path, [engine.address], grpc_server=kind, drain_timeout_s=1.0) as (
            proc,
            grpc_port,
            http,
        ),
    ):
        http_port = int(http.rsplit(":", 1)[1])
        for make in (idle_h2, stalled_upload, silent_tcp):
            held.enter_context(make(grpc_port))
        held.enter_context(metrics_keepalive(http_port))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(EXIT_BOUND_S) == 0


_TGKILL = {"x86_64": 234, "aarch64": 131}.get(platform.machine())
"""tgkill(2)'s system call number: a signal to one thread of another process."""


def _blocks(pid: int, tid: int, sig: int) -> bool:
    """Whether thread `tid` blocks `sig` (its SigBlk mask): such a thread would keep it."""
    for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def _signal_a_thread_but_main(pid: int, sig: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task")):
        if tid != pid and not _blocks(pid, tid, sig) and libc.syscall(_TGKILL, pid, tid, sig) == 0:
            return
    raise AssertionError("no thread but the main one to signal")


@pytest.mark.skipif(_TGKILL is None, reason="tgkill's number is known for x86_64 and aarch64")
@pytest.mark.parametrize("kind", GRPC_SERVERS)
def test_a_sigterm_the_kernel_gives_another_thread_stops_the_picker(
    tmp_path: Path, engines: Engines, kind: str
) -> None:
    (engine,) = engines("e")
    with picker_subprocess(tmp_path, [engine.address], grpc_server=kind, drain_timeout_s=1.0) as (
        proc,
        _,
        _,
    ):
        _signal_a_thread_but_main(proc.pid, signal.SIGTERM)
        assert proc.wait(EXIT_BOUND_S) == 0


def test_a_second_sigterm_ends_the_drain_at_once(tmp_path: Path, engines: Engines) -> None:
    (engine,) = engines("e")
    with picker_subprocess(tmp_path, [engine.address], drain_timeout_s=3600.0) as (
        proc,
        grpc_port,
        http,
    ):
        with stalled_upload(grpc_port):  # holds the hour-long drain
            proc.send_signal(signal.SIGTERM)
            wait(lambda: _not_ready(http), 20)  # draining
            assert proc.poll() is None
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(EXIT_BOUND_S) == 128 + signal.SIGTERM
