"""HTTP routes of the extender (routes only, the decisions live in service.py).

    POST /<filterVerb>       ExtenderArgs -> ExtenderFilterResult      (default /filter)
    POST /<prioritizeVerb>   ExtenderArgs -> HostPriorityList          (default /prioritize)
    GET  /debug/explain?pod=NS/NAME[&top=N]   each node's terms for the last decisions
                             (404 when `explain.enabled` is false)
    GET  /metrics            Prometheus text format
    GET  /healthz            200 while the process serves
    GET  /readyz             200 after the first list of nodes, pods and NodeSignals (when
                             kubernetes.node_signals; always, standalone)

The two verbs are served by a lean ASGI callable (`ExtenderApp`: raw body bytes, wire.py's
parse and encode, no framework request/response objects: at 500 nodes FastAPI's machinery
cost as much CPU as the decision itself); the other routes are a FastAPI app behind it.
A body that is not an ExtenderArgs gets 400 with a JSON {"error": message}, a compressed one
(Content-Encoding) 415; one larger than `server.max_body_bytes` (default 256 MiB, a
15,000-node full NodeList) gets 413, refused from its Content-Length or while streaming,
never buffered whole; one that would take the body bytes held over all requests past
`server.max_bodies_bytes` (default 512 MiB) gets 429 with `Retry-After: 1`. Connections
are bounded in extender/connections.py. Nothing the scheduler can send produces a 5xx: an unexpected failure
is logged and counted (code "internal") and answered with `Error` set (filter;
kube-scheduler then treats the extender as failed, or skips it when registered
`ignorable: true`) or neutral scores (prioritize).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from extender.decisions import FilterDecision, PrioritizeDecision
from extender.service import NEUTRAL_SCORE, Extender
from extender.wire import WireError, dumps, encode_filter, encode_prioritize, parse_args
from kvspread.httpbase import shown

__all__ = ["ExtenderApp", "create_app"]

log = logging.getLogger("kvspread.extender.server")

_JSON = b"application/json"


_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


class _Encoded(Exception):
    """The body came with a Content-Encoding (gzip, ...): kube-scheduler never sends one."""


class _TooLarge(Exception):
    """The body is over `server.max_body_bytes`."""


class _Busy(Exception):
    """The body would take the bytes held over all requests past `server.max_bodies_bytes`."""


class BodyBytes:
    """Request body bytes held over all requests now, against `total` (one event loop
    takes and gives: no lock)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.held = 0

    def take(self, n: int) -> bool:
        """Hold `n` more bytes if they fit."""
        if self.held + n > self.total:
            return False
        self.held += n
        return True

    def give(self, n: int) -> None:
        self.held -= n


async def _read_body(
    scope: MutableMapping[str, Any], receive: _Receive, limit: int, held: BodyBytes, got: list[int]
) -> bytes:
    """The body: refused (`_TooLarge`) from Content-Length before reading, else while
    streaming, so an oversized body is never buffered whole; `_Busy` where it does not fit
    in `held` (taken from Content-Length before reading, else chunk by chunk). `got[0]` is
    what this request took from `held`, for the caller to give back. A Content-Encoding
    other than identity raises `_Encoded`."""
    length: int | None = None
    for k, v in scope["headers"]:
        if k == b"content-length":
            if v.isdigit():
                length = int(v)
        elif k == b"content-encoding" and v.strip().lower() not in (b"", b"identity"):
            raise _Encoded(v.decode("latin-1"))
    if length is not None:
        if length > limit:
            raise _TooLarge
        if not held.take(length):
            raise _Busy
        got[0] = length
    chunks: list[bytes] = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] != "http.request":  # http.disconnect: nothing more will come
            break
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        if length is None:
            if not held.take(len(chunk)):
                raise _Busy
            got[0] += len(chunk)
        chunks.append(chunk)
        if not msg.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _send_json(send: _Send, status: int, body: bytes) -> None:
    headers = [(b"content-length", b"%d" % len(body)), (b"content-type", _JSON)]
    if status == 429:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class ExtenderApp:
    """The ASGI app: POST to the two verbs is answered here, straight from the raw body
    (one parse, one encode, no framework objects: the scheduler's hot path, called for
    every pod); everything else (debug, metrics, health, and other methods on the verb
    paths, which get FastAPI's 405) goes to the FastAPI app `routes`."""

    def __init__(self, ext: Extender, routes: FastAPI) -> None:
        self.ext = ext
        self.routes = routes
        self._limit = ext.cfg.server.max_body_bytes
        # never under one largest body: an idle extender takes any body it accepts
        self.held = BodyBytes(max(ext.cfg.server.max_bodies_bytes, self._limit))
        self._verbs = {
            "/" + ext.cfg.server.filter_verb.strip("/"): "filter",
            "/" + ext.cfg.server.prioritize_verb.strip("/"): "prioritize",
        }

    async def __call__(
        self, scope: MutableMapping[str, Any], receive: _Receive, send: _Send
    ) -> None:
        verb = self._verbs.get(scope.get("path", "")) if scope["type"] == "http" else None
        if verb is None or scope["method"] != "POST":
            await self.routes(scope, receive, send)
            return
        later: list[Callable[[], None]] = []
        try:
            status, body = await self._handle(scope, receive, verb, later)
        except asyncio.CancelledError:  # a shutdown past its grace cut a request mid-body
            log.warning("request cut by the shutdown", extra={"kv": {"verb": verb}})
            status, body = 503, b'{"error":"the extender is shutting down; retry"}\n'
        await _send_json(send, status, body)
        # the bookkeeping of the decision, once the answer is on the wire: the first job
        # (ledger, metrics, explain) before any other request runs on this event loop, so
        # the next one sees the ledger entry; the speculative ones after a request that
        # came in meanwhile
        for i, job in enumerate(later):
            if i:
                await yield_to_arrivals()
            try:
                job()
            except Exception:
                log.exception("extender bookkeeping failed", extra={"kv": {"verb": verb}})

    async def _handle(
        self,
        scope: MutableMapping[str, Any],
        receive: _Receive,
        verb: str,
        later: list[Callable[[], None]],
    ) -> tuple[int, bytes]:
        start = time.perf_counter()
        ext, limit = self.ext, self._limit
        code = "200"
        got = [0]
        try:
            try:
                body = await _read_body(scope, receive, limit, self.held, got)
            except _Busy:
                code = "429"
                return 429, dumps(
                    {
                        "error": f"request bodies in flight hold {self.held.held} of the "
                        f"{self.held.total} bytes allowed over all requests "
                        "(server.max_bodies_bytes); retry later"
                    }
                )
            except _TooLarge:
                code = "413"
                return 413, dumps(
                    {
                        "error": f"request body is larger than server.max_body_bytes "
                        f"({limit} bytes); raise it for clusters with larger NodeLists, or "
                        "register the extender with nodeCacheCapable: true (names only)"
                    }
                )
            except _Encoded as exc:
                code = "415"
                return 415, dumps(
                    {
                        "error": f"Content-Encoding {exc} is not supported: send the "
                        "ExtenderArgs JSON uncompressed, as kube-scheduler does"
                    }
                )
            try:
                args = parse_args(body)
            except WireError as exc:
                code = "400"
                return 400, dumps({"error": str(exc)})
            except RecursionError:
                code = "400"
                return 400, dumps({"error": "request body nests too deeply"})
            try:
                if verb == "filter":
                    out = encode_filter(args, ext.filter(args))
                else:
                    out = encode_prioritize(args, ext.prioritize(args, later))
            except Exception:
                code = "internal"
                log.exception("extender failed on a valid request", extra={"kv": {"verb": verb}})
                n = len(args.names)
                if verb == "filter":
                    out = encode_filter(args, FilterDecision.failure(n))
                else:
                    out = encode_prioritize(args, PrioritizeDecision.neutral(n, NEUTRAL_SCORE))
            return 200, out
        finally:
            self.held.give(got[0])
            m = ext.metrics
            m.child(m.requests, verb, code).inc()
            m.child(m.duration, verb).observe(time.perf_counter() - start)


async def yield_to_arrivals() -> None:
    """Let a request whose bytes arrived while this task ran go first: three turns of the
    event loop (one polls the socket, one starts the new request's task, one runs it ahead
    of this one), on asyncio's loop and on uvloop's
    (tests/extender/test_extender_server.py)."""
    for _ in range(3):
        await asyncio.sleep(0)


def _whole(text: str) -> int | None:
    """A query parameter as a whole number (`10`), or None (`abc`, `1.5`, `1e3`)."""
    text = text.strip()
    return int(text) if text.lstrip("-").isdigit() and text.isascii() else None


def create_app(ext: Extender, ready: Callable[[], bool]) -> ExtenderApp:
    """Build the ASGI app for `ext`; `ready()` backs /readyz."""
    app = FastAPI(
        title="kvspread scheduler extender",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    m = ext.metrics
    verbs = (ext.cfg.server.filter_verb.strip("/"), ext.cfg.server.prioritize_verb.strip("/"))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Any, exc: StarletteHTTPException) -> Response:
        """FastAPI's own 404 and 405 as every other answer here: `{"error": ...}`, with the
        path and what to use, not `{"detail": "Not Found"}`."""
        path = shown(str(request.url.path))
        if exc.status_code == 404:
            message = f"no such path {path}; the extender serves POST /{verbs[0]} and /{verbs[1]}, GET /healthz, /readyz, /metrics and /debug/explain"
        elif exc.status_code == 405:
            message = f"method {request.method} not allowed on {path}"
        else:
            message = str(exc.detail)
        headers = dict(exc.headers or {})
        return JSONResponse({"error": message}, status_code=exc.status_code, headers=headers)

    async def _verb_route() -> Response:
        # never called: ExtenderApp answers every POST to a verb itself; the route is here
        # so that FastAPI answers the other methods on the verb paths with 405
        return Response(status_code=405)

    for verb in verbs:
        app.add_api_route("/" + verb, _verb_route, methods=["POST"])

    @app.get("/debug/explain")
    async def explain_route(pod: str = "", top: str | None = None) -> Response:
        if not ext.cfg.explain.enabled:
            return JSONResponse({"error": "/debug/explain is off (explain.enabled)"}, 404)
        if "/" not in pod or pod.startswith("/") or pod.endswith("/"):
            return JSONResponse(
                {"error": "query parameter pod must be NAMESPACE/NAME, e.g. ?pod=default/llm-0"},
                status_code=400,
            )
        n_top = None if top is None else _whole(top)
        if top is not None and (n_top is None or n_top < 1):
            return JSONResponse(
                {"error": f"top must be a whole number >= 1, got {top!r}"}, status_code=400
            )
        doc = ext.explain(pod, n_top)
        if doc is None:
            return JSONResponse({"error": f"no recent decision about pod {pod}"}, status_code=404)
        return Response(content=dumps(doc), media_type="application/json")

    @app.get("/metrics")
    async def metrics_route() -> Response:
        for resource, synced in ext.state.synced().items():
            m.cache_synced.labels(resource).set(1 if synced else 0)
        m.ledger_bindings.source = ext.state.ledger.bindings
        return Response(content=generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(content=b"ok", media_type="text/plain")

    @app.get("/readyz")
    async def readyz() -> Response:
        if ready():
            return Response(content=b"ok", media_type="text/plain")
        pending = ", ".join(r for r, done in ext.state.synced().items() if not done)
        return Response(
            content=f"not ready: first list not complete: {pending}".encode(),
            media_type="text/plain",
            status_code=503,
        )

    return ExtenderApp(ext, app)
