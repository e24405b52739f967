"""An HTTP/1.1 server with exact control of its writes, for the response-framing tests.

Usage: framing_server.py PORT. Serves one connection at a time, keep-alive, pipelining
(every complete request in what one recv() returned is answered in order). The path says
how to answer:

  /len/PARTS/GAP_MS/HOW      Content-Length body written in PARTS writes GAP_MS apart
  /chunked/PARTS/GAP_MS/HOW  chunked body, PARTS chunks, the terminator split in two writes
  /close/GAP_MS              neither length nor chunking: body, then close GAP_MS later
  /nobody                    204 No Content
  /v1/chat/completions?sse=TOKENS/GAP_MS/PER
                             vLLM-shaped chat.completion.chunk SSE stream (chunked), PER
                             events per write, each event split over two writes when PER=0

HOW is the syscall of the body writes: write, send (sendto), writev, sendmsg or sendfile.
HEAD requests get the head of /len without the body. For every request one JSON line
goes to stdout: the CLOCK_MONOTONIC instants just before and just after the recv() that
returned the request and the last write of its response (the test's truth brackets), and
for /sse the instant just after each write that completed a data event.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import time

TOKENS = ("Hello", " there", ",", " how", " can", " I", " help", " you", " today", "?")


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n" % len(payload) + payload + b"\r\n"


def sse_event(i: int, n: int) -> bytes:
    """One `data:` event as vLLM's OpenAI server writes it for token i of n."""
    choice = {
        "index": 0,
        "delta": {"content": TOKENS[i % len(TOKENS)]}
        if i
        else {"role": "assistant", "content": ""},
        "logprobs": None,
        "finish_reason": "stop" if i == n - 1 else None,
    }
    body = {
        "id": "chatcmpl-5f0c7e2b9a3d4c1e8f6a2b7c9d0e1f2a",
        "object": "chat.completion.chunk",
        "created": 1764576000,
        "model": "Qwen/Qwen2.5-VL-7B-Instruct",
        "choices": [choice],
    }
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


class Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.last = (0, 0)
        self.events: list[int] = []  # just after the write completing each event
        self.spans: list[tuple[int, int]] = []  # (just before, just after) that write

    def out(self, data: bytes, how: str = "send") -> None:
        before = time.monotonic_ns()
        fd = self.sock.fileno()
        if how == "write":
            os.write(fd, data)
        elif how == "writev":
            half = len(data) // 2
            os.writev(fd, [data[:half], data[half:]])
        elif how == "sendmsg":
            self.sock.sendmsg([data[:3], data[3:]])
        elif how == "sendfile":
            with tempfile.TemporaryFile() as f:
                f.write(data)
                f.flush()
                os.sendfile(fd, f.fileno(), 0, len(data))
        else:
            self.sock.send(data)
        self.last = (before, time.monotonic_ns())


def answer(c: Conn, method: str, path: str) -> bool:
    """Write the response; False when the connection is to be closed."""
    if path.startswith("/v1/chat/completions?sse="):
        path = "/sse/" + path.split("=", 1)[1]
    parts = path.strip("/").split("/")
    kind, args = parts[0], parts[1:]
    if kind == "len":
        n, gap, how = int(args[0]), int(args[1]) / 1000, args[2]
        body = b"x" * (40 * n)
        c.out(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(body)
        )
        if method == "HEAD":
            return True
        for i in range(n):
            time.sleep(gap)
            c.out(body[40 * i : 40 * (i + 1)], how)
    elif kind == "chunked":
        n, gap, how = int(args[0]), int(args[1]) / 1000, args[2]
        c.out(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(n):
            time.sleep(gap)
            c.out(_chunk(b"line %d." % i), how)
        time.sleep(gap)
        c.out(b"0\r\n", how)
        time.sleep(gap)
        c.out(b"\r\n", how)
    elif kind == "close":
        c.out(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it")
        time.sleep(int(args[0]) / 1000)
        return False
    elif kind == "nobody":
        c.out(b"HTTP/1.1 204 No Content\r\nServer: framing\r\n\r\n")
    elif kind == "sse":
        n, gap, per = int(args[0]), int(args[1]) / 1000, int(args[2])
        c.out(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        events = [sse_event(i, n) for i in range(n)] + [b"data: [DONE]\n\n"]
        if per == 0:  # every event split across two TCP writes
            for ev in events:
                time.sleep(gap)
                c.out(_chunk(ev[:17]))
                c.out(_chunk(ev[17:]))
                c.events.append(c.last[1])
                c.spans.append(c.last)
        else:
            for i in range(0, len(events), per):
                time.sleep(gap)
                c.out(_chunk(b"".join(events[i : i + per])))
                c.events += [c.last[1]] * len(events[i : i + per])
                c.spans += [c.last] * len(events[i : i + per])
        c.events = c.events[:n]  # [DONE] is not a token
        c.spans = c.spans[:n]
        c.out(b"0\r\n\r\n")
    return True


def serve(sock: socket.socket) -> None:
    c = Conn(sock)
    buf = b""
    while True:
        before = time.monotonic_ns()
        data = sock.recv(65536)
        after = time.monotonic_ns()
        if not data:
            return
        buf += data
        while b"\r\n\r\n" in buf:
            head, buf = buf.split(b"\r\n\r\n", 1)
            method, path = head.split(b" ")[:2]
            c.events, c.spans = [], []
            keep = answer(c, method.decode(), path.decode())
            truth = {"path": path.decode(), "read": [before, after], "last": list(c.last)}
            if c.events:
                truth["events"] = c.events
                truth["spans"] = [list(x) for x in c.spans]
            print(json.dumps(truth), flush=True)
            if not keep:
                return


def main() -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", int(sys.argv[1])))
    srv.listen(16)
    print("ready", flush=True)
    while True:
        conn, _ = srv.accept()
        with conn:
            serve(conn)


if __name__ == "__main__":
    main()
