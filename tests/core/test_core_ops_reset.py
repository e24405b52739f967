"""A client that resets its connection (a probe or scrape that timed out) leaves the JSON log
parseable: the collector's and the router's operator endpoints close quietly, with no
multi-line traceback on stderr, and keep serving.

The real commands run in subprocesses; the resets are real ones (SO_LINGER 0 and close,
so the kernel sends RST), mid request line and right after a whole request. An unknown
path of 60 KiB gets a 404 that quotes at most `SHOWN_CHARS` of it, not all of it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from kvspread.httpbase import SHOWN_CHARS

WAIT_S = 60
"""Upper bound on each wait (a hang fails the test instead of blocking the run)."""

COMMANDS = {
    "collector": (
        ["collector", "run", "--standalone", "--no-bpf", "--no-nvml", "--port", "0"],
        "collector listening",
        "port",
    ),
    "router": (
        ["router", "serve", "--endpoints", "127.0.0.1:9", "--grpc-port", "0", "--http-port", "0"],
        "router serving",
        "http_port",
    ),
}


def _reset(port: int, data: bytes) -> None:
    """Send `data`, then close with RST instead of FIN."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as s:
        s.sendall(data)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@pytest.mark.parametrize("part", sorted(COMMANDS))
def test_client_resets_leave_the_json_log_parseable(part: str, tmp_path: Path) -> None:
    argv, started, port_key = COMMANDS[part]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVSPREAD_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvspread", *argv, "--log-level", "info"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        port = 0
        while not port:
            line = proc.stderr.readline()
            assert line, f"{part} exited before serving: {''.join(lines)}"
            lines.append(line)
            doc = json.loads(line)
            if doc.get("msg") == started:
                port = int(doc[port_key])
        for _ in range(5):
            _reset(port, b"GET /metr")  # mid request line: the server's read is reset
            _reset(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")  # its write is
        ok = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=WAIT_S)
        assert ok.status_code == 200, "it stopped serving after the resets"
        long = httpx.get(f"http://127.0.0.1:{port}/{'x' * 60_000}", timeout=WAIT_S)
        assert long.status_code == 404
        assert len(long.content) < SHOWN_CHARS + 200, "the 404 echoes the whole path"
        assert "(60001 characters)" in long.json()["error"]
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=WAIT_S)
        lines += rest.splitlines(keepends=True)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT_S)
    text = "".join(lines)
    assert "Traceback" not in text, text
    docs = [json.loads(line) for line in lines]  # every line of stderr is one JSON object
    if part == "router":  # it says why it stops, and that it did
        assert {"msg": "router stopping", "signal": "SIGTERM"}.items() <= docs[-2].items()
        assert docs[-1]["msg"] == "router stopped"
