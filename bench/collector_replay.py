"""User-space CPU of the collector per request, without a kernel: recorded-shape events
replayed through the agent's real event path (decode, tracker, parsing, attribution,
histograms, optionally OTLP), in the batches the ring-buffer reader hands over.

    python3 bench/collector_replay.py [--requests 20000] [--batch 1000] [--profile] [--two-events]

Each request is the one COMPLETE record the kernel sends for a keep-alive request whose
response ends as its head says (the captured request bytes, the response's times and
status), shaped like bench/collector_bench.py's traffic; `--two-events` replays the two
events of the older programs instead (REQUEST with the captured bytes, RESPONSE_DONE with
the response head), as the kernel still sends when the head does not say how it ends. Printed per request, process CPU time (no root needed):
identical requests (a load test, health checks: parsed once), requests whose body differs
each time (real prompts: parsed each time), each without and with an OTLP exporter (a fake
endpoint that drops the payload, so the OTel SDK side is measured, not the network).
`--profile` adds a cProfile listing of the unique-body case. Nothing is asserted; other
processes on the machine add noise, so report the machine state with the numbers.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bpf.agent import Agent  # noqa: E402
from bpf.config import CollectorConfig  # noqa: E402
from bpf.events import ConnState, HttpEvent, HttpEventKind, encode_http_event  # noqa: E402
from tests.otel_fake import FakeOtlpExporter  # noqa: E402

REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
    b'Content-Length: 50\r\n\r\n{"messages":[{"role":"user","content":"00000"}]}\r\n'
)
RESPONSE = (
    b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{"ok": true}\n'
)


def events(n: int, unique: bool, two: bool = False) -> list[bytes]:
    out = []
    tgid, t = os.getpid(), 10**9
    for i in range(n):
        fd = 10 + i % 16
        req = REQUEST.replace(b"00000", b"%05d" % (i % 100_000)) if unique else REQUEST
        if not two:
            out.append(
                encode_http_event(
                    HttpEvent(
                        HttpEventKind.COMPLETE, t, 1, tgid, fd, 8000, len(req), ConnState.IDLE,
                        t + 5000, len(RESPONSE), req, t + 100, resp_ns=t + 5000, status=200,
                    )
                )
            )  # fmt: skip
            t += 10_000
            continue
        out.append(
            encode_http_event(
                HttpEvent(
                    HttpEventKind.REQUEST, t, 1, tgid, fd, 8000, len(req), ConnState.IDLE, 0, 0, req
                )
            )
        )
        out.append(
            encode_http_event(
                HttpEvent(
                    HttpEventKind.RESPONSE_DONE,
                    t + 5000,
                    1,
                    tgid,
                    fd,
                    8000,
                    len(RESPONSE),
                    ConnState.REQUEST,
                    0,
                    len(RESPONSE),
                    RESPONSE,
                    t + 100,
                )  # fmt: skip
            )
        )
        t += 10_000
    return out


def replay(
    raws: list[bytes], requests: int, batch: int, otlp: bool, profile: bool = False
) -> float:
    """Process CPU microseconds per request."""
    agent = Agent(
        CollectorConfig(standalone=True, port=0),
        otlp_exporter=FakeOtlpExporter(keep=False) if otlp else None,
    )
    prof = cProfile.Profile() if profile else None
    try:
        t0 = time.process_time()
        if prof:
            prof.enable()
        on_batch = getattr(agent, "on_http_batch", None)
        for i in range(0, len(raws), batch):
            if on_batch is not None:
                on_batch(raws[i : i + batch])
            else:  # an agent before batching (to replay on an older commit)
                for raw in raws[i : i + batch]:
                    agent.on_http_bytes(raw)
        if prof:
            prof.disable()
        cpu = time.process_time() - t0
    finally:
        agent.server.httpd.server_close()
        if agent.otlp:
            agent.otlp.shutdown()
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)
    return cpu / requests * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=1000, help="events per batch (one poll)")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--two-events", action="store_true", help="REQUEST + RESPONSE_DONE each")
    args = ap.parse_args()
    n, two = args.requests, args.two_events
    print("| requests | OTLP | user-space CPU per request |\n| --- | --- | --- |")
    for unique in (False, True):
        raws = events(n, unique, two)
        for otlp in (False, True):
            us = replay(raws, n, args.batch, otlp)
            what = "unique bodies" if unique else "identical"
            print(f"| {what} | {'yes' if otlp else 'no'} | {us:.1f} us |")
    if args.profile:
        replay(events(n, True, two), n, args.batch, True, profile=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
