"""A server that accepts slowly: listens, then accepts one connection every DELAY seconds,
printing CLOCK_MONOTONIC nanoseconds just before and just after each accept() (the test's
truth brackets)."""

from __future__ import annotations

import socket
import sys
import time

port, delay, count = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen(64)
print("ready", flush=True)
sys.stdin.readline()  # the client has connected everything
conns = []
for _ in range(count):
    time.sleep(delay)
    before = time.monotonic_ns()
    c, _addr = srv.accept()
    print(before, time.monotonic_ns(), flush=True)
    conns.append(c)
for c in conns:
    c.close()
srv.close()
