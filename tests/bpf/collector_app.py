"""A small OpenAI-style server for the collector tests (served by uvicorn in a subprocess).

POST /v1/chat/completions takes a JSON body with test controls:
  {"delay_ms": 40, "status": 200, "chunks": 0, "chunk_ms": 0, ...anything else...}
and answers JSON (chunks == 0) or an SSE stream of `chunks` events `chunk_ms` apart.
GET /v1/models/{id} answers 200 at once. Every request appends one JSON line to the file
named by $KVSPREAD_TEST_TRUTH with the server-side truth, measured inside the server on
CLOCK_MONOTONIC (the clock BPF timestamps use): start (app called), first response
bytes sent, last response bytes sent (each bracketed: just before and just after the
ASGI send, because uvicorn writes to the socket inside it), keyed by the X-LLM-Context-ID header.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

TRUTH = os.environ.get("KVSPREAD_TEST_TRUTH", "/dev/null")
STAMPS: dict[tuple[str, int], int] = {}


class StampedH11(H11Protocol):
    """uvicorn's h11 protocol, noting when the first bytes of each request arrive: the
    server-side start of the request (the ASGI app is called only after parsing)."""

    def data_received(self, data: bytes) -> None:
        cycle = getattr(self, "cycle", None)
        if (cycle is None or cycle.response_complete) and self.client:
            STAMPS[(self.client[0], self.client[1])] = time.monotonic_ns()
        super().data_received(data)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    t_app = time.monotonic_ns()
    client = scope.get("client")
    t0 = STAMPS.pop((client[0], client[1]), t_app) if client else t_app
    body = b""
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            break
    headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
    ctl: dict[str, Any] = {}
    if scope["method"] == "POST":
        try:
            ctl = json.loads(body or b"{}")
        except ValueError:
            ctl = {}
    delay = float(ctl.get("delay_ms", 0)) / 1000
    status = int(ctl.get("status", 200))
    chunks = int(ctl.get("chunks", 0))
    chunk_s = float(ctl.get("chunk_ms", 0)) / 1000
    if delay:
        await asyncio.sleep(delay)
    if chunks:
        first_before = time.monotonic_ns()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        first = time.monotonic_ns()
        for i in range(chunks):
            data = json.dumps({"choices": [{"delta": {"content": f"tok{i}"}}]}).encode()
            await send(
                {
                    "type": "http.response.body",
                    "body": b"data: " + data + b"\n\n",
                    "more_body": True,
                }
            )
            if chunk_s:
                await asyncio.sleep(chunk_s)
        end_before = time.monotonic_ns()
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
    else:
        out = json.dumps(
            {
                "id": headers.get("x-llm-context-id", ""),
                "object": "chat.completion",
                "choices": [{"message": {"content": "ok"}}],
            }
        ).encode()
        first_before = time.monotonic_ns()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(out)).encode()),
                ],
            }
        )
        first = time.monotonic_ns()
        end_before = time.monotonic_ns()
        await send({"type": "http.response.body", "body": out, "more_body": False})
    end = time.monotonic_ns()
    with open(TRUTH, "a") as f:
        f.write(
            json.dumps(
                {
                    "id": headers.get("x-llm-context-id", ""),
                    "start": t0,
                    "first_before": first_before,
                    "first": first,
                    "end_before": end_before,
                    "end": end,
                    "status": status,
                    "path": scope["path"],
                }
            )
            + "\n"
        )
