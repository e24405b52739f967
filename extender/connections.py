"""Bounds on the extender's HTTP connections, which uvicorn leaves open.

Why: uvicorn (0.55, its httptools protocol) waits for ever on a connection that has not
sent a whole request head, takes a request head of any size, and any number of
connections. Measured on the extender before this module: 3,000 idle connections took it
from 63 to 81 MiB RSS and 3,009 file descriptors; one 19 MiB header block to 101 MiB.
kube-scheduler needs a few connections and sends heads of a few hundred bytes. This is
uvicorn's own protocol with three checks added:

- at most `max_connections` open at once: one more is answered 503 (JSON, `Retry-After: 1`)
  and closed as it opens;
- a request head (request line and headers) has `header_timeout_s` from the connection's
  opening, or from the first byte of a later request on it, to arrive whole: else 408 and
  the connection is closed (uvicorn's own keep-alive timeout, 5 s, still closes a
  connection idle between requests);
- a request head over `max_header_bytes` (checked after each read, so at most one read
  more is parsed) gets 431 and the connection is closed, lingering (`_refuse`);
- a request body has `body_timeout_s` from the end of its head to arrive whole: else 408
  and the connection is closed (found black-box: 1,024 connections that each sent one
  body byte of 100,000 held every slot, and a SIGTERM waited on them, for ever).

Request bodies are bounded by the app (extender/server.py), per request and in total.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from extender.config import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_HEADER_BYTES,
)

__all__ = ["LINGER_S", "REFUSALS", "bounded_protocol"]

REFUSALS = ("max_connections", "header_timeout", "body_timeout", "header_too_large")
"""Why a connection was refused, the `reason` of kvspread_extender_connections_refused_total."""

LINGER_S = 2.0
"""After a refusal, how long the client's further bytes are read and dropped before the
connection is closed (a lingering close, as nginx's `lingering_time` does)."""


def _answer(status: str, message: str, extra: str = "") -> bytes:
    body = json.dumps({"error": message}, separators=(",", ":")).encode() + b"\n"
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n{extra}connection: close\r\n\r\n"
    )
    return head.encode() + body


class _Bounded(HttpToolsProtocol):
    """uvicorn's httptools protocol with the module's three bounds (set by
    `bounded_protocol`)."""

    max_connections = DEFAULT_MAX_CONNECTIONS
    header_timeout_s = DEFAULT_HEADER_TIMEOUT_S
    max_header_bytes = DEFAULT_MAX_HEADER_BYTES
    body_timeout_s = DEFAULT_BODY_TIMEOUT_S
    refused: dict[str, int] = {}  # noqa: RUF012 - one per protocol class (bounded_protocol)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._discarding = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            self._refuse(
                "503 Service Unavailable",
                f"the extender serves {self.max_connections} connections at once "
                "(server.max_connections); retry",
                "retry-after: 1\r\n",
                reason="max_connections",
            )
            return
        self._arm()

    def _arm(self) -> None:
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_too_slow)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _refuse(self, status: str, message: str, extra: str = "", *, reason: str) -> None:
        """Answer and close, lingering: the client may still be sending (a large head), and
        a close with its bytes unread would make the kernel reset the connection and lose
        the answer. So: the answer, end of our side, then whatever comes is read and dropped
        until the client closes or `LINGER_S` passes."""
        self._disarm()
        if self.transport.is_closing() or self._discarding:
            return
        self._discarding = True
        self.refused[reason] = self.refused.get(reason, 0) + 1
        self.transport.write(_answer(status, message, extra))
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self._head_timer = self.loop.call_later(LINGER_S, self.transport.close)
        else:  # TLS: no half-close
            self.transport.close()

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self._in_head and not self._discarding:
            self._refuse(
                "408 Request Timeout",
                f"no whole request head within {self.header_timeout_s:g} s "
                "(server.header_timeout_s)",
                reason="header_timeout",
            )

    def data_received(self, data: bytes) -> None:
        if self._discarding or self.transport.is_closing():
            return
        if self._in_head:
            if self._head_timer is None:
                self._arm()
            self._head_bytes += len(data)
        super().data_received(data)
        # checked after the parse: a chunk that completes the head may carry body bytes
        if self._in_head and self._head_bytes > self.max_header_bytes:
            self._refuse(
                "431 Request Header Fields Too Large",
                f"request line and headers over {self.max_header_bytes} bytes "
                "(server.max_header_bytes)",
                reason="header_too_large",
            )

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm()
        super().on_headers_complete()
        self._head_timer = self.loop.call_later(self.body_timeout_s, self._body_too_slow)

    def _body_too_slow(self) -> None:
        self._head_timer = None
        if self._in_head or self._discarding:
            return
        cycle = getattr(self, "cycle", None)
        if cycle is not None and cycle.response_started:  # answered early (413): just close
            self.transport.close()
        else:
            self._refuse(
                "408 Request Timeout",
                f"no whole request body within {self.body_timeout_s:g} s of its head "
                "(server.body_timeout_s)",
                reason="body_timeout",
            )

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()
        self._in_head = True  # what comes next is the next request's head
        self._head_bytes = 0

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def bounded_protocol(
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
) -> type[HttpToolsProtocol]:
    """The protocol class to give uvicorn (`uvicorn.Config(http=...)`) with these bounds."""
    return type(
        "BoundedHttpToolsProtocol",
        (_Bounded,),
        {
            "max_connections": max_connections,
            "header_timeout_s": header_timeout_s,
            "max_header_bytes": max_header_bytes,
            "body_timeout_s": body_timeout_s,
            "refused": dict.fromkeys(REFUSALS, 0),
        },
    )
